// The CUDA engine (uocr/engine/engine.hpp): CudaVisionEncoder and page groups over CudaDecoder +
// CudaKvCache.
//
// The engine owns the device model: the decoder's weights, uploaded once and shared by every
// session opened on the engine, and the vision encoder. Each session's decoder gets its
// own Context (stream, cuBLAS handle, allocator, scratch), so sessions in different threads run
// concurrently on the GPU without locking; the shared weights are read-only. The vision encoder
// (its weights uploaded on the first vision() call) runs on the device model's Context, one view
// at a time under its lock.
//
// Continuous batching (BatchParams, uocr/decoder/step_batcher.hpp): the engine's DeviceBatcher
// runs its documents' decode steps through CudaDecoder::decode_batch.
//
// CUDA graphs (`cuda_graphs`, SessionParams::cuda_graphs, on by default): every decoder this
// engine makes, the batch decoder included, replays its dense decode steps as graphs.
//
// SR-SWA works as on Vulkan (selection and attention on the device: sparse.hpp); checkpoints copy
// the KV rows through the host (ReservedKvRing::visit_rows) in the CPU's layout, so a
// checkpoint written on any backend resumes here and the other way round.
#pragma once
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/context.hpp"
#include "backends/cuda/decoder.hpp"
#include "backends/cuda/vision.hpp"
#include "backends/cuda/weights.hpp"
#include "backends/device/vision_engine.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/engine.hpp"
#include "uocr/model/model.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

// One model's decoder weights on one device; what holds it keeps the model (whose weights the
// decoders and the encoder read) alive too. Members are destroyed in reverse order: the Context
// (which owns the weights' memory) after everything on it, the model last.
struct DeviceModel {
  DeviceModel(std::shared_ptr<const Model> m, int device_index)
      : model(std::move(m)),
        ctx(device_index),
        decoder(DecoderDeviceWeights::upload(ctx, model->config().decoder, model->weights().decoder)) {
    ctx.synchronize();  // other Contexts (other streams) read these weights
  }

  std::shared_ptr<const Model> model;
  Context ctx;
  std::shared_ptr<const DecoderDeviceWeights> decoder;
  std::mutex vision_mutex;                    // guards `vision` and ctx's use by it
  std::unique_ptr<CudaVisionEncoder> vision;  // made by the first vision() call

  // The vision encoder, made (weights uploaded) the first time; call with vision_mutex held.
  CudaVisionEncoder& vision_encoder(const Model& model) {
    if (!vision) vision = std::make_unique<CudaVisionEncoder>(ctx, model.config(), model.weights());
    return *vision;
  }
};

using CudaPageGroups = BasicPageGroupDecoder<CudaDecoder, CudaKvCache>;

using CudaVisionEngine = DeviceVisionEngine<DeviceModel>;

// Continuous batching on one device: the batch CudaDecoder on its own Context (stream, scratch)
// over the shared weights; the documents' caches stay in their sessions' Contexts.
struct DeviceBatcher {
  using Batcher = PageGroupEngine<CudaPageGroups>::Batcher;
  DeviceBatcher(std::shared_ptr<DeviceModel> d, const BatchParams& p, bool cuda_graphs)
      : dev(std::move(d)), ctx(dev->ctx.info().index),
        batcher(with_graphs(CudaDecoder(ctx, dev->model->config().decoder, dev->model->weights().decoder, dev->decoder),
                            cuda_graphs),
                p, kMaxExtrapolatedPosition) {}
  static CudaDecoder with_graphs(CudaDecoder d, bool on) {
    d.set_cuda_graphs(on);
    return d;
  }
  std::shared_ptr<DeviceModel> dev;  // the weights (and model) the batch decoder reads
  Context ctx;
  Batcher batcher;
};

class CudaEngine final : public Engine {
 public:
  // Opens device `options.device_index` for `model` and uploads the decoder weights.
  // Status::unsupported without a driver or device; invalid_argument for an index out of range.
  // batching.max_batch > 1: the decode steps of this engine's documents without SR-SWA are
  // batched. cuda_graphs: decode steps replay CUDA graphs (CudaDecoder::set_cuda_graphs).
  CudaEngine(std::shared_ptr<const Model> m, const EngineOptions& options)
      : Engine(std::move(m), options), dev_(std::make_shared<DeviceModel>(model(), options.device_index)),
        graphs_(options.cuda_graphs) {
    validate(options.batching);
    if (options.batching.max_batch > 1) batcher_ = std::make_shared<DeviceBatcher>(dev_, options.batching, graphs_);
  }

  EngineInfo info() const override {
    const DeviceInfo& d = dev_->ctx.info();
    return {Backend::cuda, d.index, d.name, d.driver};
  }
  std::unique_ptr<VisionEngine> vision() override { return std::make_unique<CudaVisionEngine>(model(), dev_); }
  std::unique_ptr<DecoderEngine> decoder(int window, const PageGroupParams& groups) override {
    // The session's own Context, kept alive (with the shared weights and the model) by the owner.
    struct Owner {
      explicit Owner(std::shared_ptr<DeviceModel> d) : dev(std::move(d)), ctx(dev->ctx.info().index) {}
      std::shared_ptr<DeviceModel> dev;
      Context ctx;
    };
    auto owner = std::make_shared<Owner>(dev_);
    const DecoderConfig& c = model()->config().decoder;
    auto e = std::make_unique<PageGroupEngine<CudaPageGroups>>(
        owner,
        DeviceBatcher::with_graphs(CudaDecoder(owner->ctx, c, model()->weights().decoder, dev_->decoder), graphs_),
        CudaKvCache(owner->ctx, c, window), groups);
    // SR-SWA selects from one document's summaries (CudaDecoder's mirror): such documents step
    // alone.
    if (batcher_ && !groups.sparse) e->batch_steps(std::shared_ptr<DeviceBatcher::Batcher>(batcher_, &batcher_->batcher));
    return e;
  }
  BatchStats batch_stats() const override { return batcher_ ? batcher_->batcher.stats() : BatchStats{}; }

 private:
  std::shared_ptr<DeviceModel> dev_;
  std::shared_ptr<DeviceBatcher> batcher_;  // null: batching off
  bool graphs_;                             // decode steps through CUDA graphs
};

}  // namespace cuda
UOCR_NAMESPACE_END
