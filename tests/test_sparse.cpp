// SR-SWA (uocr/decoder/sparse_reference.hpp): the Quest bound, the gate tree (node bounds, updates,
// same pages as a flat gate), the gathered kernel against a naive attention over the selected rows,
// full budgets bit-identical to dense R-SWA (one-shot and page groups), logits deviation as budgets
// shrink (the golden 1-page case and the 3-page multi_3 case, both tiny-b), summaries following page-group slides, and a
// standalone timing (skipped unless run with --no-skip).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "support/logit_agreement.hpp"
#include "support/op_reference.hpp"
#include "support/test_support.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/io/npy.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"

using uocr_test::argmax;
using uocr_test::bit_identical;
using uocr_test::randn;
using uocr_test::rel_err;
using uocr_test::status_of;

namespace {

// A decoder model with a prompt (ids + visual tokens) and a teacher-forced stream.
struct Case {
  uocr::ModelConfig cfg;
  uocr::Checkpoint ck;
  uocr::ModelWeights w;
  std::vector<int32_t> ids, gen;
  std::vector<float> vision;
  int64_t head = 0, pages = 0, page_tokens = 0, tail = 0;
  int window = 0;

  Case(const std::string& config, const std::string& weights, const std::string& data, int64_t n_pages, int win)
      : cfg(uocr::ModelConfig::load(config)), ck(uocr::Checkpoint::open(weights)), w(uocr::ModelWeights::bind(ck, cfg)),
        ids(uocr_test::npy_ids(data + "/input_ids.npy")), gen(uocr_test::npy_ids(data + "/gen_ids.npy")),
        vision(uocr::read_npy(data + "/vision_tokens.npy").to_f32()), pages(n_pages), window(win) {
    const auto first = std::find(ids.begin(), ids.end(), uocr::kImageTokenId);
    const auto last = std::find_if(first, ids.end(), [](int32_t t) { return t != uocr::kImageTokenId; });
    head = int64_t(first - ids.begin());
    page_tokens = int64_t(last - first) / pages;
    tail = int64_t(ids.end() - last);
  }
  uocr::ReferenceLayout layout() const { return uocr::one_shot_layout(head, pages, page_tokens, tail); }
  int64_t blocks(int block_tokens) const { return pages * ((page_tokens + block_tokens - 1) / block_tokens); }

  // Prefill logits then one row per generated id, with `attention` (nullptr = dense) in decode.
  std::vector<std::vector<float>> run(uocr::SparseReference* sparse, int steps = -1) const {
    uocr::Decoder dec(cfg.decoder, w.decoder);
    uocr::KvCache cache(cfg.decoder, window);
    std::vector<std::vector<float>> rows{dec.prefill(dec.embed_prompt(ids, vision), 0, cache)};
    if (sparse) {
      sparse->rebuild(cache);
      dec.set_decode_attention(sparse);
    }
    const int n = steps < 0 ? int(gen.size()) : steps;
    for (int k = 0; k < n; ++k) rows.push_back(dec.decode_step(gen[size_t(k)], int64_t(ids.size()) + k, cache));
    return rows;
  }
};

// The attention dimensions SparseReference reads from a decoder config.
uocr::DecoderConfig attention_config(int layers, int heads, int kv_heads, int head_dim) {
  uocr::DecoderConfig c;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  return c;
}

Case& golden() {  // tiny-b, 1 page of 273, "document parsing.", 300 generated, R-SWA n = 128
  static Case c(uocr_test::golden_model_dir() + "/config.json", uocr_test::golden_model_dir(), uocr_test::golden(""), 1, 128);
  return c;
}
Case& multi3() {  // tiny-b, 3 pages of 273, 40 generated, R-SWA n = 8
  static Case c(uocr_test::reference_dir() + "/tiny-b/config.json", uocr_test::reference_dir() + "/tiny-b", uocr_test::reference_dir() + "/cases/multi_3", 3, 8);
  return c;
}

}  // namespace

TEST_CASE("the Quest bound of a block bounds q·k of every key in it") {
  const uocr::DecoderConfig c = attention_config(1, 4, 2, 16);
  const uocr::ReferenceLayout layout = uocr::one_shot_layout(3, 5, 50, 4);
  uocr::SparseParams sp;
  sp.block_tokens = 7;
  uocr::SparseReference sr(c, layout, sp);
  const int64_t kr = 2 * 16, rows = layout.rows();
  std::vector<float> k(size_t(rows * kr)), q(16);
  k = randn(k.size(), 1);
  for (size_t p = 0; p < 5; ++p) sr.summarize(0, p, k.data());
  CHECK(sr.block_count() == 5 * 8);  // 50 tokens in blocks of 7: 7 full + 1 of 1
  int violations = 0, tight = 0;
  for (uint32_t trial = 0; trial < 20; ++trial) {
    q = randn(q.size(), 100 + trial);
    for (int g = 0; g < 2; ++g)
      for (int64_t b = 0; b < int64_t(sr.block_count()); ++b) {
        const int64_t pg = b / 8, first = 3 + pg * 50 + (b % 8) * 7, n = std::min<int64_t>(7, 3 + (pg + 1) * 50 - first);
        float best = -1e30f;
        for (int64_t r = first; r < first + n; ++r) {
          float dot = 0;
          for (int i = 0; i < 16; ++i) dot += q[size_t(i)] * k[size_t(r * kr + g * 16 + i)];
          best = std::max(best, dot);
        }
        const float bound = sr.block_bound(0, g, b, q.data());
        violations += bound < best - 1e-4f;
        tight += n == 1 && std::abs(bound - best) < 1e-4f;  // one-key blocks: the bound is exact
      }
  }
  CHECK(violations == 0);
  CHECK(tight == 20 * 2 * 5);
}

TEST_CASE("SR-SWA attends exactly to the selected blocks + always rows + window (naive check, GQA)") {
  const uocr::DecoderConfig c = attention_config(2, 4, 2, 8);
  const uocr::AttentionShape s{4, 2, 8};
  const uocr::ReferenceLayout layout = uocr::one_shot_layout(2, 12, 40, 3);
  const int64_t kr = s.kv_row(), rows = layout.rows(), gen_rows = 9;
  std::vector<float> k(size_t(rows * kr)), v(k.size()), gk(size_t(gen_rows * kr)), gv(gk.size()), q(size_t(s.q_row()));
  k = randn(k.size(), 2);
  v = randn(v.size(), 3);
  gk = randn(gk.size(), 4);
  gv = randn(gv.size(), 5);
  q = randn(q.size(), 6);
  for (int budget_pages : {1, 3, 12})
    for (int budget_blocks : {1, 4, 9}) {
      uocr::SparseParams sp;
      sp.block_tokens = 8;
      sp.page_budget = budget_pages;
      sp.block_budget = budget_blocks;
      uocr::SparseReference sr(c, layout, sp);
      for (size_t p = 0; p < 12; ++p) sr.summarize(1, p, k.data());
      for (size_t p = 0; p < 12; ++p) sr.summarize(0, p, k.data());
      std::vector<float> out(size_t(s.q_row()));
      sr.attend(1, q.data(), {k.data(), v.data(), rows}, {gk.data(), gv.data(), gen_rows}, s, out.data());
      double worst = 0;
      for (int h = 0; h < 4; ++h) {
        const std::vector<uocr::RowSpan>& sel = sr.last_selection(h);
        int64_t n_sel = 0;
        for (const uocr::RowSpan& r : sel) n_sel += r.rows;
        CHECK(n_sel <= 2 + 3 + int64_t(budget_blocks) * 8);
        CHECK(n_sel >= 2 + 3 + 1);
        // Always rows are in the selection.
        CHECK(sel.front().begin == 0);
        CHECK(sel.back().end() == rows);
        const int g = s.kv_head_of(h);
        std::vector<double> sc;
        std::vector<const float*> vr;
        auto add = [&](const float* kk, const float* vv) {
          double dot = 0;
          for (int i = 0; i < 8; ++i) dot += double(q[size_t(h * 8 + i)]) * kk[g * 8 + i];
          sc.push_back(dot / std::sqrt(8.0));
          vr.push_back(vv + g * 8);
        };
        for (const uocr::RowSpan& r : sel)
          for (int64_t i = r.begin; i < r.end(); ++i) add(&k[size_t(i * kr)], &v[size_t(i * kr)]);
        for (int64_t i = 0; i < gen_rows; ++i) add(&gk[size_t(i * kr)], &gv[size_t(i * kr)]);
        const double mx = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int d = 0; d < 8; ++d) {
          double o = 0;
          for (size_t j = 0; j < sc.size(); ++j) o += sc[j] / sum * vr[j][d];
          worst = std::max(worst, std::abs(o - out[size_t(h * 8 + d)]));
        }
      }
      INFO("pages " << budget_pages << " blocks " << budget_blocks);
      CHECK(worst < 1e-5);
    }
}

TEST_CASE("the gate tree: a node's bound bounds every page and key under it; one page's update reaches its ancestors") {
  const uocr::DecoderConfig c = attention_config(2, 4, 2, 12);  // one 8-lane pass + 4 leftover channels
  const int64_t pages = 19, t = 10, kr = 2 * 12;
  const uocr::ReferenceLayout layout = uocr::one_shot_layout(2, pages, t, 3);
  uocr::SparseParams sp;
  sp.gate_fan_out = 3;  // 19 pages -> 7 nodes -> 3 nodes
  uocr::SparseReference sr(c, layout, sp);
  REQUIRE(sr.gate_levels() == 3);
  CHECK(sr.gate_nodes(0) == 19);
  CHECK(sr.gate_nodes(1) == 7);
  CHECK(sr.gate_nodes(2) == 3);
  std::vector<float> k = randn(size_t(layout.rows() * kr), 7);
  for (int l = 0; l < 2; ++l)
    for (size_t p = 0; p < size_t(pages); ++p) sr.summarize(l, p, k.data());
  auto first_page = [](int level, int64_t j) { return j * (level == 1 ? 3 : 9); };
  int below = 0, key_violations = 0, checked = 0;
  for (uint32_t trial = 0; trial < 10; ++trial) {
    const std::vector<float> q = randn(12, 200 + trial);
    for (int l = 0; l < 2; ++l)
      for (int g = 0; g < 2; ++g)
        for (int lv = 1; lv < 3; ++lv)
          for (int64_t j = 0; j < sr.gate_nodes(lv); ++j) {
            const float bound = sr.node_bound(l, g, lv, j, q.data());
            for (int64_t p = first_page(lv, j); p < std::min(first_page(lv, j + 1), pages); ++p) {
              below += bound < sr.node_bound(l, g, 0, p, q.data());  // exact: min/max and the lane sums are monotone
              for (int64_t r = layout.pages[size_t(p)].begin; r < layout.pages[size_t(p)].end(); ++r) {
                double dot = 0;
                for (int i = 0; i < 12; ++i) dot += double(q[size_t(i)]) * k[size_t(r * kr + g * 12 + i)];
                key_violations += bound < dot - 1e-4;
              }
              ++checked;
            }
          }
    // The last node of each level holds page 18 alone: its bound is that page's, bit for bit.
    CHECK(sr.node_bound(1, 1, 1, 6, q.data()) == sr.node_bound(1, 1, 0, 18, q.data()));
    CHECK(sr.node_bound(0, 0, 2, 2, q.data()) == sr.node_bound(0, 0, 0, 18, q.data()));
  }
  CHECK(checked == 10 * 2 * 2 * 2 * pages);
  CHECK(below == 0);
  CHECK(key_violations == 0);

  // Page 5's keys rewritten and re-summarized alone: every node equals a fresh index's, and the
  // ancestors (level 1 node 1, level 2 node 0) moved.
  const std::vector<float> q = randn(12, 300);
  const float before1 = sr.node_bound(1, 0, 1, 1, q.data()), before2 = sr.node_bound(1, 0, 2, 0, q.data());
  for (int64_t r = layout.pages[5].begin; r < layout.pages[5].end(); ++r)
    for (int64_t i = 0; i < kr; ++i) k[size_t(r * kr + i)] = 4.0f * k[size_t(r * kr + i)] + 1.0f;
  for (int l = 0; l < 2; ++l) sr.summarize(l, 5, k.data());
  uocr::SparseReference fresh(c, layout, sp);
  for (int l = 0; l < 2; ++l)
    for (size_t p = 0; p < size_t(pages); ++p) fresh.summarize(l, p, k.data());
  int differ = 0;
  for (int l = 0; l < 2; ++l)
    for (int g = 0; g < 2; ++g)
      for (int lv = 0; lv < 3; ++lv)
        for (int64_t j = 0; j < sr.gate_nodes(lv); ++j) differ += sr.node_bound(l, g, lv, j, q.data()) != fresh.node_bound(l, g, lv, j, q.data());
  CHECK(differ == 0);
  CHECK(sr.node_bound(1, 0, 1, 1, q.data()) != before1);
  CHECK(sr.node_bound(1, 0, 2, 0, q.data()) != before2);
}

TEST_CASE("a tree gate whose beam covers every level passes the flat gate's pages; a narrow beam scores fewer nodes") {
  const uocr::DecoderConfig c = attention_config(1, 4, 2, 8);
  const uocr::AttentionShape s{4, 2, 8};
  const int64_t pages = 40, t = 12, gen_rows = 6;
  const uocr::ReferenceLayout layout = uocr::one_shot_layout(2, pages, t, 3);
  const int64_t kr = s.kv_row(), rows = layout.rows();
  const std::vector<float> k = randn(size_t(rows * kr), 11), v = randn(size_t(rows * kr), 12), gk = randn(size_t(gen_rows * kr), 13),
                           gv = randn(size_t(gen_rows * kr), 14);
  // Page budget 3, every block of the gated pages (block budget 0): the selection shows the pages.
  uocr::SparseReference flat(c, layout, uocr::SparseParams{8, 3, 0, true, 64, 0});  // fan-out >= pages: no tree
  uocr::SparseReference wide(c, layout, uocr::SparseParams{8, 3, 0, true, 2, 40});  // 40 -> 20 -> 10 -> 5 -> 3 -> 2
  uocr::SparseReference narrow(c, layout, uocr::SparseParams{8, 3, 0, true, 2, 0});  // beam 2 · 3 = 6
  REQUIRE(flat.gate_levels() == 1);
  REQUIRE(wide.gate_levels() == 6);
  CHECK(narrow.gate_beam() == 6);
  for (uocr::SparseReference* sr : {&flat, &wide, &narrow})
    for (size_t p = 0; p < size_t(pages); ++p) sr->summarize(0, p, k.data());
  int same = 0, narrow_same = 0, calls = 0;
  for (uint32_t trial = 0; trial < 12; ++trial) {
    const std::vector<float> q = randn(size_t(s.q_row()), 400 + trial);
    std::vector<float> out_flat(size_t(s.q_row())), out_wide(out_flat.size()), out_narrow(out_flat.size());
    flat.attend(0, q.data(), {k.data(), v.data(), rows}, {gk.data(), gv.data(), gen_rows}, s, out_flat.data());
    wide.attend(0, q.data(), {k.data(), v.data(), rows}, {gk.data(), gv.data(), gen_rows}, s, out_wide.data());
    narrow.attend(0, q.data(), {k.data(), v.data(), rows}, {gk.data(), gv.data(), gen_rows}, s, out_narrow.data());
    for (int h = 0; h < 4; ++h) {
      auto pages_of = [&](const uocr::SparseReference& sr) {
        std::vector<int64_t> rows_of;
        for (const uocr::RowSpan& r : sr.last_selection(h))
          for (int64_t i = r.begin; i < r.end(); ++i) rows_of.push_back(i);
        return rows_of;
      };
      const std::vector<int64_t> f = pages_of(flat), w = pages_of(wide), n = pages_of(narrow);
      CHECK(f.size() == size_t(2 + 3 + 3 * t));  // always rows + 3 whole pages
      CHECK(n.size() == f.size());
      same += w == f;
      narrow_same += n == f;
      ++calls;
    }
    CHECK(bit_identical(out_wide, out_flat));
  }
  CHECK(same == calls);
  MESSAGE("narrow beam (6 nodes per level, fan-out 2): the flat gate's pages in " << narrow_same << "/" << calls << " head-steps");
  // Bounds per head and call: flat 40 pages; wide every node of every level (2+3+5+10+20+40);
  // narrow at most 2 + 3 + 5 + 10 + 12 + 12.
  CHECK(flat.bounds_evaluated() == 12 * 4 * 40);
  CHECK(wide.bounds_evaluated() == 12 * 4 * 80);
  CHECK(narrow.bounds_evaluated() == 12 * 4 * 44);
  CHECK(wide.scratch_bytes() > wide.summary_bytes());
  CHECK(status_of([&] { uocr::SparseReference(c, layout, uocr::SparseParams{8, 3, 0, true, 1, 0}); }) == uocr::Status::invalid_argument);
  CHECK(status_of([&] { uocr::SparseReference(c, layout, uocr::SparseParams{8, 3, 0, true, 4, -1}); }) == uocr::Status::invalid_argument);
}

TEST_CASE("SR-SWA with budgets covering everything is dense R-SWA, bit for bit") {
  for (Case* c : {&golden(), &multi3()}) {
    const std::vector<std::vector<float>> dense = c->run(nullptr);
    for (const uocr::SparseParams& sp : {uocr::SparseParams{16, 0, 0, true}, uocr::SparseParams{16, int(c->pages), int(c->blocks(16)), true},
                                         uocr::SparseParams{17, 100, 100000, true}}) {
      uocr::SparseReference sr(c->cfg.decoder, c->layout(), sp);
      const std::vector<std::vector<float>> rows = c->run(&sr);
      int identical = 0;
      for (size_t i = 0; i < rows.size(); ++i) identical += bit_identical(rows[i], dense[i]);
      INFO(c->pages << " page(s), block " << sp.block_tokens << ", budgets " << sp.page_budget << "/" << sp.block_budget);
      CHECK(identical == int(rows.size()));
      CHECK(sr.rows_attended() == sr.rows_dense());
    }
    // The gathered kernel itself (no dense shortcut) over every row: equal up to summation order.
    uocr::SparseReference sr(c->cfg.decoder, c->layout(), uocr::SparseParams{16, 0, 0, false});
    const std::vector<std::vector<float>> rows = c->run(&sr);
    double worst = 0;
    for (size_t i = 0; i < rows.size(); ++i) worst = std::max(worst, rel_err(rows[i], dense[i]));
    MESSAGE(c->pages << " page(s): gathered kernel over all rows vs dense: max rel err " << worst);
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("SR-SWA logits deviation from dense R-SWA as budgets shrink (table)") {
  struct Row {
    int pages, blocks;
  };
  for (Case* c : {&golden(), &multi3()}) {
    const std::vector<std::vector<float>> dense = c->run(nullptr);
    const int per_page = int((c->page_tokens + 15) / 16);
    std::vector<Row> grid;
    for (int p = int(c->pages); p >= 1; --p)
      for (int b : {per_page * int(c->pages), 8, 4, 2, 1}) grid.push_back({p, std::min(b, p * per_page)});
    MESSAGE(c->pages << " page(s) x " << c->page_tokens << " tokens, block 16, " << dense.size() - 1 << " decode steps:");
    MESSAGE("  page budget | block budget | ref rows attended | max rel err | mean rel err | argmax agree");
    double full_err = -1, smallest_err = 0;
    for (const Row& r : grid) {
      uocr::SparseReference sr(c->cfg.decoder, c->layout(), uocr::SparseParams{16, r.pages, r.blocks, true});
      const std::vector<std::vector<float>> rows = c->run(&sr);
      double worst = 0, mean = 0;
      int agree = 0;
      for (size_t i = 1; i < rows.size(); ++i) {
        const double e = rel_err(rows[i], dense[i]);
        worst = std::max(worst, e);
        mean += e;
        agree += argmax(rows[i]) == argmax(dense[i]);
      }
      mean /= double(rows.size() - 1);
      for (const std::vector<float>& row : rows)
        REQUIRE(std::all_of(row.begin(), row.end(), [](float x) { return std::isfinite(x); }));
      MESSAGE("  " << r.pages << " | " << r.blocks << " | " << double(sr.rows_attended()) / double(sr.rows_dense()) * 100 << "% | "
                   << worst << " | " << mean << " | " << agree << "/" << rows.size() - 1);
      if (r.pages == int(c->pages) && r.blocks == per_page * int(c->pages)) full_err = worst;
      if (r.pages == 1 && r.blocks == 1) smallest_err = worst;
    }
    CHECK(full_err == 0.0);
    CHECK(smallest_err > 0.0);
  }
}

TEST_CASE("page groups + SR-SWA: full budgets equal one-shot dense; summaries follow the slides") {
  Case& c = multi3();
  const std::vector<std::vector<float>> dense = c.run(nullptr);
  uocr::DocumentLayout L;
  L.head.assign(c.ids.begin(), c.ids.begin() + c.head);
  L.tail.assign(c.ids.end() - c.tail, c.ids.end());
  L.pages = 3;
  L.page_tokens = c.page_tokens;
  const int64_t hidden = c.cfg.decoder.hidden;
  auto source = [&] {
    return uocr::FunctionPageEmbeddings(3, [&](int64_t p, std::vector<float>& out) {
      const size_t n = size_t(c.page_tokens * hidden);
      out.assign(c.vision.begin() + std::ptrdiff_t(size_t(p) * n), c.vision.begin() + std::ptrdiff_t(size_t(p + 1) * n));
    });
  };
  {
    uocr::PageGroupParams pp;
    pp.group_pages = 3;
    pp.overlap_pages = 2;
    pp.sparse = true;
    pp.sparse_params = {16, 0, 0, true};
    uocr::PageGroupDecoder eng(c.cfg.decoder, c.w.decoder, c.window, pp);
    uocr::FunctionPageEmbeddings src = source();
    int identical = bit_identical(eng.start(L, src), dense[0]);
    for (size_t k = 0; k < c.gen.size(); ++k) identical += bit_identical(eng.step(c.gen[k]), dense[k + 1]);
    CHECK(identical == int(dense.size()));
    CHECK(eng.memory().sparse_summary_bytes > 0);
  }
  {
    // G = 2 with a small budget: after the slide, the summaries of the rewritten slot equal
    // those of a fresh index over the same cache (checked through the bounds of random queries).
    uocr::PageGroupParams pp;
    pp.group_pages = 2;
    pp.overlap_pages = 1;
    pp.sparse = true;
    pp.sparse_params = {16, 1, 4, true};
    uocr::PageGroupDecoder eng(c.cfg.decoder, c.w.decoder, c.window, pp);
    uocr::FunctionPageEmbeddings src = source();
    eng.start(L, src);
    for (size_t k = 0; k < 10; ++k) eng.step(c.gen[k]);
    eng.next_page();  // page 1 is the last of [0, 2): slides to [1, 3), page 2 into slot 0
    REQUIRE(eng.slides() == 1);
    for (size_t k = 10; k < 20; ++k) {
      const std::vector<float>& l = eng.step(c.gen[k]);
      REQUIRE(std::all_of(l.begin(), l.end(), [](float x) { return std::isfinite(x); }));
    }
    uocr::SparseReference fresh(c.cfg.decoder, eng.sparse()->layout(), pp.sparse_params);
    fresh.rebuild(eng.cache());
    std::vector<float> q(size_t(c.cfg.decoder.head_dim));
    int differ = 0;
    for (uint32_t trial = 0; trial < 5; ++trial) {
      q = randn(q.size(), 50 + trial);
      for (int l = 0; l < c.cfg.decoder.layers; ++l)
        for (int g = 0; g < c.cfg.decoder.kv_heads; ++g)
          for (int64_t b = 0; b < int64_t(fresh.block_count()); ++b)
            differ += fresh.block_bound(l, g, b, q.data()) != eng.sparse()->block_bound(l, g, b, q.data());
    }
    CHECK(differ == 0);
    CHECK(eng.sparse()->rows_attended() < eng.sparse()->rows_dense());
  }
}

// Standalone timing of the reference attention of one decode step (one layer): dense R-SWA
// (decode_attention over every reference row + the window) against SR-SWA (gate + selector +
// gathered attention), random K/V, pages of 273 tokens, window 128. Skipped by default:
//   build/tests/test_cpu --no-skip -tc='*timing*'      (UOCR_TIMING_PAGES=10,100,1000 to choose)
TEST_CASE("SR-SWA vs dense attention step time (standalone timing)" * doctest::skip()) {
  struct Dims {
    const char* name;
    int heads, kv_heads, head_dim;
  };
  std::vector<int64_t> page_counts{10, 100, 1000};
  if (const char* env = std::getenv("UOCR_TIMING_PAGES")) {
    page_counts.clear();
    for (const char* p = env; *p;) {
      page_counts.push_back(std::strtoll(p, nullptr, 10));
      while (*p && *p != ',') ++p;
      if (*p == ',') ++p;
    }
  }
  const int64_t t = 273, window = 128, head = 1, tail = 5;
  for (const Dims& dm : {Dims{"tiny-a dims (4 heads x 8)", 4, 4, 8}, Dims{"real dims (10 heads x 128)", 10, 10, 128}}) {
    const uocr::AttentionShape s{dm.heads, dm.kv_heads, dm.head_dim};
    const uocr::DecoderConfig c = attention_config(1, dm.heads, dm.kv_heads, dm.head_dim);
    for (int64_t pages : page_counts) {
      const uocr::ReferenceLayout layout = uocr::one_shot_layout(head, pages, t, tail);
      const int64_t rows = layout.rows(), kr = s.kv_row();
      std::vector<float> k(size_t(rows * kr)), v(k.size()), gk(size_t(window * kr)), gv(gk.size()), q(size_t(s.q_row()));
      uint32_t x = 12345;  // cheap LCG: random enough for timing, fast for GBs
      auto fill = [&](std::vector<float>& a) {
        for (float& f : a) f = float(int32_t(x = x * 1664525u + 1013904223u) >> 8) * (1.0f / 8388608.0f);
      };
      fill(k);
      fill(v);
      fill(gk);
      fill(gv);
      fill(q);
      std::vector<float> out(size_t(s.q_row())), scores(size_t(s.heads * (rows + window)));
      uocr::SparseReference sr(c, layout, uocr::SparseParams{});
      const auto tb = std::chrono::steady_clock::now();
      for (size_t p = 0; p < size_t(pages); ++p) sr.summarize(0, p, k.data());
      const double build = std::chrono::duration<double>(std::chrono::steady_clock::now() - tb).count();
      auto time_it = [&](auto fn) {
        fn();
        int reps = 0;
        const auto t0 = std::chrono::steady_clock::now();
        double el = 0;
        do {
          fn();
          ++reps;
          el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        } while (el < 0.3 && reps < 2000);
        return el / reps * 1e3;
      };
      const double dense_ms = time_it([&] {
        uocr::decode_attention(q.data(), {k.data(), v.data(), rows}, {gk.data(), gv.data(), window}, s, scores.data(), out.data());
      });
      const double sparse_ms = time_it([&] {
        q[0] += 1e-3f;  // a new query each call
        sr.attend(0, q.data(), {k.data(), v.data(), rows}, {gk.data(), gv.data(), window}, s, out.data());
      });
      MESSAGE(std::string(dm.name) << ", " << pages << " pages (" << rows << " reference rows, " << double(rows * kr * 8) / 1e6
                      << " MB K+V): dense " << dense_ms << " ms, SR-SWA " << sparse_ms << " ms (page budget 4, 64 blocks of 16), "
                      << dense_ms / sparse_ms << "x; summaries " << double(sr.summary_bytes()) / 1e6 << " MB built in "
                      << build * 1e3 << " ms");
    }
  }
}
