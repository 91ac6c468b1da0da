// Comparing our logits with an upstream reference run: whole-row relative error, and agreement
// with the reference's per-row summaries (top-16 ids and values, logsumexp). Shared by every
// parity test so that "matches upstream" means the same thing everywhere.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>

namespace uocr_test {

struct RowError {
  double rel = 0, max_abs = 0;
};

// ‖ours − ref‖ / ‖ref‖ (‖ours‖ when ref is all zeros) and the largest absolute difference (infinite
// if either side is not finite), over the first n values of two pointers or containers.
template <class Ours, class Ref>
RowError row_error(const Ours& ours, const Ref& ref, int64_t n) {
  double d2 = 0, r2 = 0, mx = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(ours[i]) - double(ref[i]);
    d2 += d * d;
    r2 += double(ref[i]) * double(ref[i]);
    mx = std::max(mx, std::isfinite(d) ? std::abs(d) : INFINITY);
  }
  return {r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2), mx};
}
// The same over two whole containers, which must be the same size.
template <class Ours, class Ref>
RowError row_error(const Ours& ours, const Ref& ref) {
  REQUIRE(ours.size() == ref.size());
  return row_error(ours, ref, int64_t(ref.size()));
}
template <class Ours, class Ref>
double rel_err(const Ours& ours, const Ref& ref) {
  return row_error(ours, ref).rel;
}

// Ids of the 16 largest values, largest first; equal values keep the lower id first.
inline std::array<int32_t, 16> top16(const float* x, int64_t n) {
  std::array<int32_t, 16> top{};
  int count = 0;
  for (int32_t i = 0; i < int32_t(n); ++i) {
    if (count == 16 && x[i] <= x[top[15]]) continue;
    int at = count < 16 ? count++ : 15;
    for (; at > 0 && x[i] > x[top[size_t(at - 1)]]; --at) top[size_t(at)] = top[size_t(at - 1)];
    top[size_t(at)] = i;
  }
  return top;
}

struct AgreementLimits {
  double top_rel = 1e-4;      // each top-16 logit, relative to max(1, |ref|)
  double lse_rel = 1e-4;      // logsumexp, relative to max(1, |ref|)
  float tie_gap = 1e-4f;      // reference neighbours closer than this may swap rank
  float argmax_margin = 1e-2f;  // argmax must agree where the reference top-2 gap exceeds this
};

// Agreement statistics of our logits rows against the reference summaries, accumulated over rows.
struct Agreement {
  AgreementLimits limits;
  int rows = 0;
  int rows_top16_exact = 0;      // rows whose top-16 id lists are identical
  int unexplained_id_swaps = 0;  // rank mismatches not explained by a reference near-tie
  double max_top_abs = 0, max_top_rel = 0, max_lse_abs = 0, max_lse_rel = 0;
  int argmax_checked = 0, argmax_agree = 0;

  explicit Agreement(AgreementLimits l = {}) : limits(l) {}

  void add(const float* ours, int64_t vocab, const int32_t* ref_ids, const float* ref_vals, float ref_lse) {
    ++rows;
    for (int r = 0; r < 16; ++r) {
      const double d = std::abs(double(ours[ref_ids[r]]) - ref_vals[r]);
      max_top_abs = std::max(max_top_abs, d);
      max_top_rel = std::max(max_top_rel, d / std::max(1.0, std::abs(double(ref_vals[r]))));
    }
    const std::array<int32_t, 16> top = top16(ours, vocab);
    bool exact = true;
    for (int r = 0; r < 16; ++r) {
      if (top[size_t(r)] == ref_ids[r]) continue;
      exact = false;
      const bool tie_before = r > 0 && ref_vals[r - 1] - ref_vals[r] < limits.tie_gap;
      const bool tie_after = r < 15 && ref_vals[r] - ref_vals[r + 1] < limits.tie_gap;
      // Rank 16 may tie with the reference's unseen rank 17.
      const bool tie_last = r == 15 && std::abs(ours[top[15]] - ref_vals[15]) < limits.tie_gap;
      if (!(tie_before || tie_after || tie_last)) ++unexplained_id_swaps;
    }
    rows_top16_exact += exact;
    double mx = ours[0];
    for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, double(ours[i]));
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(ours[i]) - mx);
    const double lse_d = std::abs(mx + std::log(sum) - ref_lse);
    max_lse_abs = std::max(max_lse_abs, lse_d);
    max_lse_rel = std::max(max_lse_rel, lse_d / std::max(1.0, std::abs(double(ref_lse))));
    if (ref_vals[0] - ref_vals[1] > limits.argmax_margin) {
      ++argmax_checked;
      argmax_agree += top[0] == ref_ids[0];
    }
  }

  void check(const std::string& what) const {
    MESSAGE(what << ": " << rows << " rows, top-16 lists identical in " << rows_top16_exact
                 << ", unexplained id swaps " << unexplained_id_swaps << ", top-16 logit max rel err " << max_top_rel
                 << " (abs " << max_top_abs << "), lse max rel err " << max_lse_rel << " (abs " << max_lse_abs
                 << "), argmax " << argmax_agree << "/" << argmax_checked << " where margin > " << limits.argmax_margin);
    CHECK(rows > 0);
    CHECK(unexplained_id_swaps == 0);
    CHECK(max_top_rel <= limits.top_rel);
    CHECK(max_lse_rel <= limits.lse_rel);
    CHECK(argmax_agree == argmax_checked);
  }
};

}  // namespace uocr_test
