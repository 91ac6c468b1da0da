// MoE routing on the device (DeepSeek-V2: softmax scoring, greedy top-k, no renormalisation by
// default), grouping of the token→expert assignments, and the weighted combine.
//
// route:   one thread per token row, the CPU's loop exactly: max, e = expf(l − max) summed in
//          expert order, p = e / sum; then k greedy passes, each taking the highest remaining
//          probability with a strict '>' while scanning experts upwards, so the lower index wins
//          ties (uocr::moe_forward's rule); weights = p (÷ (Σ picked + 1e-20) only when
//          normalising and k > 1) × routed scaling.
// group:   a stable counting sort of the m·k assignments (a = row·k + j) by expert, in one block
//          of 32 warps, warp w owning experts w, w+32, ...: (1) each warp counts its experts'
//          assignments 32 at a time with a ballot; (2) thread 0 turns the counts into starts;
//          (3) each warp walks the assignments again in ascending a and places the ones of its
//          expert at start + (matches so far), so start[e] .. start[e+1] hold expert e's
//          assignments in ascending a, exactly the serial counting sort; rows[i] = order[i] / k,
//          slot[a] = i (the inverse permutation). No atomics: the result is unique.
// combine: one thread per output element; the row's k experts are visited in ascending expert
//          index, the CPU's summation order, then the shared experts' output is added.
// Layout: logits/probabilities [m, experts], choice/weight [m, k], expert outputs [m·k, hidden]
// in grouped order, y [m, hidden]; all float32 / int32.
#include "common.cuh"

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;

__global__ void route_kernel(float* logits, int64_t m, int experts, int k, bool normalize, float scaling, int32_t* choice,
                             float* weight) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= m) return;
  float* p = logits + r * experts;
  float mx = p[0];
  for (int e = 1; e < experts; ++e) mx = fmaxf(mx, p[e]);
  float sum = 0.f;
  for (int e = 0; e < experts; ++e) sum += (p[e] = expf(p[e] - mx));
  for (int e = 0; e < experts; ++e) p[e] /= sum;
  int32_t* ch = choice + r * k;
  float* wt = weight + r * k;
  float picked = 0.f;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < experts; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken |= ch[i] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;
    }
    ch[j] = best;
    wt[j] = p[best];
    picked += wt[j];
  }
  for (int j = 0; j < k; ++j) wt[j] = (normalize && k > 1 ? wt[j] / (picked + 1e-20f) : wt[j]) * scaling;
}

constexpr int kGroupThreads = 1024;

__global__ void __launch_bounds__(kGroupThreads)
    group_kernel(const int32_t* choice, int64_t assignments, int experts, int k, int32_t* start, int32_t* order,
                 int32_t* rows, int32_t* slot) {
  extern __shared__ int32_t first[];  // [experts]: count, then first grouped position
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  for (int e = warp; e < experts; e += warps) {
    int32_t n = 0;
    for (int64_t a0 = 0; a0 < assignments; a0 += kWarp) {
      const int64_t a = a0 + lane;
      n += __popc(__ballot_sync(0xffffffffu, a < assignments && choice[a] == e));
    }
    if (lane == 0) first[e] = n;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t at = 0;
    for (int e = 0; e < experts; ++e) {
      const int32_t n = first[e];
      start[e] = first[e] = at;
      at += n;
    }
    start[experts] = at;
  }
  __syncthreads();
  const unsigned below = (1u << lane) - 1u;  // lanes under this one
  for (int e = warp; e < experts; e += warps) {
    int32_t at = first[e];
    for (int64_t a0 = 0; a0 < assignments; a0 += kWarp) {
      const int64_t a = a0 + lane;
      const bool mine = a < assignments && choice[a] == e;
      const unsigned match = __ballot_sync(0xffffffffu, mine);
      if (mine) {
        const int32_t i = at + __popc(match & below);
        order[i] = int32_t(a);
        rows[i] = int32_t(a / k);
        slot[a] = i;
      }
      at += __popc(match);
    }
  }
}

__global__ void combine_kernel(const float* expert_out, const int32_t* choice, const float* weight, const int32_t* slot,
                               const float* shared, int64_t m, int k, int64_t hidden, float* y) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < m * hidden; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / hidden, col = t % hidden;
    const int32_t* ch = choice + r * k;
    float acc = 0.f;
    int32_t prev = -1;
    for (int n = 0; n < k; ++n) {  // next expert above `prev`: ascending expert order
      int j = -1;
      for (int i = 0; i < k; ++i)
        if (ch[i] > prev && (j < 0 || ch[i] < ch[j])) j = i;
      prev = ch[j];
      acc += weight[r * k + j] * expert_out[int64_t(slot[r * k + j]) * hidden + col];
    }
    y[t] = shared ? acc + shared[t] : acc;
  }
}

}  // namespace

void ops::moe_route(Context& c, float* logits, int64_t m, int experts, int k, bool normalize, float scaling,
                    int32_t* choice, float* weight) {
  require(experts > 0 && k > 0 && k <= experts && m >= 0, Status::invalid_argument, "CUDA moe_route: bad shape");
  if (m == 0) return;
  route_kernel<<<blocks_for(m, kThreads), kThreads, 0, stream(c)>>>(logits, m, experts, k, normalize, scaling, choice,
                                                                    weight);
  check_launch("moe_route");
}

void ops::moe_group(Context& c, const int32_t* choice, int64_t m, int experts, int k, int32_t* start, int32_t* order,
                    int32_t* rows, int32_t* slot) {
  require(m >= 0 && m * k < (int64_t(1) << 31), Status::invalid_argument, "CUDA moe_group: too many assignments");
  require(experts > 0 && experts <= 8192, Status::unsupported, "CUDA moe_group: at most 8192 experts");
  group_kernel<<<1, kGroupThreads, size_t(experts) * sizeof(int32_t), stream(c)>>>(choice, m * k, experts, k, start, order,
                                                                                   rows, slot);
  check_launch("moe_group");
}

void ops::moe_combine(Context& c, const float* expert_out, const int32_t* choice, const float* weight,
                      const int32_t* slot, const float* shared, int64_t m, int k, int64_t hidden, float* y) {
  if (m * hidden <= 0) return;
  const unsigned grid = grid_stride_blocks(m * hidden, kThreads);
  combine_kernel<<<grid, kThreads, 0, stream(c)>>>(expert_out, choice, weight, slot, shared, m, k, hidden, y);
  check_launch("moe_combine");
}

}  // namespace cuda
UOCR_NAMESPACE_END
