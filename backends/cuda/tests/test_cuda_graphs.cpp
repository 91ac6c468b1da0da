// CUDA graphs of decode steps (CudaDecoder::set_cuda_graphs, Context::capture). With a GPU, on the
// golden (tiny-b) model: decode steps replayed from graphs give exactly the logits of the same
// steps run eagerly (bit for bit), one sequence and batches of 2 and 3 with different cache
// lengths, across R-SWA ring wraps, a full-attention cache growing past the graph's key capacity
// and a prefill that re-sizes the decoder's buffers (both re-capture); the graph counters say the
// graph path was taken. Context::capture's contract: a capture that needs an allocation returns
// false, one that calls something a capture cannot hold throws "CUDA graph capture: ...", and the
// stream works normally afterwards either way; a graph captured again over other buffers (the
// cudaGraphExecUpdate path) runs on the new ones. Without a usable GPU the cases are skipped and
// the executable exits 77 (gpu_test.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/decoder.hpp"
#include "support/golden_decoder.hpp"
#include "support/gpu_test.hpp"
#include "support/test_support.hpp"

namespace cu = uocr::cuda;
using uocr::Status;
using uocr_test::no_gpu;

namespace {

struct Env : uocr_test::DeviceGolden<cu::Context, cu::DecoderDeviceWeights> {
  static Env& get() {
    static Env e;
    return e;
  }
  cu::CudaDecoder decoder(bool graphs) {
    REQUIRE_MESSAGE(ctx != nullptr, no_device);
    if (!dev_weights) dev_weights = cu::DecoderDeviceWeights::upload(*ctx, cfg.decoder, w.decoder);
    cu::CudaDecoder d(*ctx, cfg.decoder, w.decoder, dev_weights);
    d.set_cuda_graphs(graphs);
    return d;
  }
};

// A host round trip through the stream: it still runs work after a capture ended.
void check_stream_usable(cu::Context& c) {
  const std::vector<float> in{1.5f, -2.0f, 3.25f};
  cu::Buffer b = c.alloc(in.size() * sizeof(float), "round trip");
  c.upload(b, 0, in.data(), in.size() * sizeof(float));
  std::vector<float> out(in.size());
  c.download(b, 0, out.data(), out.size() * sizeof(float));
  CHECK(out == in);
}

}  // namespace

TEST_CASE("Context::capture: allocation -> false, a refused call -> Error, the stream usable after; recapture updates" *
          doctest::skip(no_gpu())) {
  Env& e = Env::get();
  REQUIRE_MESSAGE(e.ctx != nullptr, e.no_device);
  cu::Context& c = *e.ctx;
  cu::Graph g;

  CHECK_FALSE(c.capture(g, [&] { cu::Buffer b = c.alloc(4096, "inside a capture"); }));
  CHECK(g.empty());
  check_stream_usable(c);

  const std::string why = uocr_test::message_of([&] { c.capture(g, [&] { c.synchronize(); }); });
  CHECK(why.rfind("CUDA graph capture: ", 0) == 0);
  CHECK(why.find("stream synchronize during graph capture") != std::string::npos);
  CHECK(g.empty());
  check_stream_usable(c);

  // A graph that zeroes one buffer, captured again for another: the executable runs the new one.
  const std::vector<float> ones(64, 1.0f);
  cu::Buffer first = c.alloc(ones.size() * sizeof(float), "first"), second = c.alloc(ones.size() * sizeof(float), "second");
  c.upload(first, 0, ones.data(), ones.size() * sizeof(float));
  c.upload(second, 0, ones.data(), ones.size() * sizeof(float));
  REQUIRE(c.capture(g, [&] { c.zero(first.data(), first.bytes()); }));
  REQUIRE(c.capture(g, [&] { c.zero(second.data(), second.bytes()); }));
  c.launch(g);
  std::vector<float> a(ones.size()), b(ones.size());
  c.download(first, 0, a.data(), a.size() * sizeof(float));
  c.download(second, 0, b.data(), b.size() * sizeof(float));
  CHECK(a == ones);
  CHECK(b == std::vector<float>(ones.size(), 0.0f));
  CHECK(uocr_test::status_of([&] { c.launch(cu::Graph()); }) == Status::internal);
}

TEST_CASE("one sequence: graph steps == eager steps bit for bit (ring wrap, key capacity grown, buffers re-sized)" *
          doctest::skip(no_gpu())) {
  Env& e = Env::get();
  const uocr::DecoderConfig& d = e.cfg.decoder;
  cu::CudaDecoder graphs = e.decoder(true), eager = e.decoder(false);
  const int64_t p = int64_t(e.input_ids.size());  // 278 prompt rows
  const std::vector<float> input = graphs.embed_prompt(e.input_ids, e.vision);
  // R-SWA n=8 (the ring wraps after 8 steps) and full attention (513 keys at step 234).
  cu::CudaKvCache g_ring(*e.ctx, d, 8), e_ring(*e.ctx, d, 8), g_full(*e.ctx, d, 0), e_full(*e.ctx, d, 0);
  graphs.prefill(input, 0, g_ring);
  graphs.prefill(input, 0, g_full);
  eager.prefill(input, 0, e_ring);
  eager.prefill(input, 0, e_full);
  const int steps = 250;
  REQUIRE(e.gen_ids.size() >= size_t(steps));
  int64_t captures_before_prefill = 0;
  for (int s = 0; s < steps; ++s) {
    if (s == 100) {
      // A longer prefill (prompt + 40 generated tokens) re-sizes the decoder's activation buffers,
      // its row table and the attention scratch: the next step captures again.
      std::vector<float> longer = input;
      const std::vector<float> more = graphs.embed(std::vector<int32_t>(e.gen_ids.begin(), e.gen_ids.begin() + 40));
      longer.insert(longer.end(), more.begin(), more.end());
      cu::CudaKvCache g_other(*e.ctx, d, 8), e_other(*e.ctx, d, 8);
      graphs.prefill(longer, 0, g_other);
      eager.prefill(longer, 0, e_other);
      captures_before_prefill = graphs.graph_stats().captures;
    }
    const int32_t token = e.gen_ids[size_t(s)];
    INFO("step " << s);
    CHECK(graphs.decode_step(token, p + s, g_ring) == eager.decode_step(token, p + s, e_ring));
    CHECK(graphs.decode_step(token, p + s, g_full) == eager.decode_step(token, p + s, e_full));
    if (s == 100) CHECK(graphs.graph_stats().captures == captures_before_prefill + 1);
  }
  // Captures: the first step (key capacity 512), after the prefill, and when the full cache's
  // 513th key raised the capacity to 1024. Every step replayed a graph.
  const cu::CudaDecoder::GraphStats& st = graphs.graph_stats();
  INFO("last capture failure: " << st.last_failure);
  CHECK(st.captures == 3);
  CHECK(st.replays == 2 * steps);
  CHECK(st.eager_steps == 0);
  CHECK(st.last_failure.empty());
  CHECK(eager.graph_stats().captures == 0);
  CHECK(eager.graph_stats().replays == 0);
}

TEST_CASE("batches of 2 and 3 with different cache lengths: graph steps == eager steps bit for bit" * doctest::skip(no_gpu())) {
  Env& e = Env::get();
  cu::CudaDecoder graphs = e.decoder(true), eager = e.decoder(false);
  const std::vector<float> input = graphs.embed_prompt(e.input_ids, e.vision);
  std::vector<cu::CudaKvCache> gc = e.staggered_caches<cu::CudaKvCache>(graphs, input),
                               ec = e.staggered_caches<cu::CudaKvCache>(eager, input);
  const int steps = 40;
  for (int s = 0; s < steps; ++s) {
    // Sequence 2 joins at step 5, so its cache is 5 rows shorter than the others from then on.
    const auto b = e.staggered_step(s);
    std::vector<cu::CudaKvCache*> g_caches, e_caches;
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      g_caches.push_back(&gc[i]);
      e_caches.push_back(&ec[i]);
    }
    INFO("step " << s);
    if (s % 4 == 3) {
      CHECK(graphs.decode_batch_greedy(b.tokens, b.positions, g_caches) ==
            eager.decode_batch_greedy(b.tokens, b.positions, e_caches));
    } else {
      CHECK(graphs.decode_batch(b.tokens, b.positions, g_caches) == eager.decode_batch(b.tokens, b.positions, e_caches));
    }
  }
  const cu::CudaDecoder::GraphStats& st = graphs.graph_stats();
  INFO("last capture failure: " << st.last_failure);
  CHECK(st.captures == 2);  // one graph per batch size
  CHECK(st.replays == steps);
  CHECK(st.eager_steps == 0);
  CHECK(eager.graph_stats().replays == 0);
}

int main(int argc, char** argv) { return uocr_test::gpu_test_main(argc, argv); }
