// MoE routing on the device, the CPU's rule (uocr::moe_route): per row of router logits the
// softmax (in place), the greedy top-k (best first; equal scores: the lower expert index wins),
// the mixing weights; then the rows grouped by expert for the expert GEMMs, and per expert and
// GEMM shape the VkDispatchIndirectCommand that runs exactly its rows. One workgroup: the
// grouping needs every row's choice, and a routing is small (rows x experts).
//
// route[] (uint words, A = rows * k; layout in ops.hpp, MoeRouteLayout):
//   choice [A]      experts of row r at r*k.., best first
//   weight [A]      their mixing weights (float bits)
//   mix_pos [A]     row r's grouped slots, in ascending expert order (the order the CPU adds them)
//   mix_weight [A]  the matching weights (float bits)
//   order [A]       grouped slot -> row; expert e owns slots [first_e, first_e + count_e)
//   slot_expert [A] grouped slot -> expert (the stacked mat-vecs of a decode step)
//   experts [2E]    (first_e, count_e)
//   commands [6E]   expert e, shape s (0: gate/up, 1: down): (x, y, z) workgroups
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Pb { float probs[]; };
layout(std430, binding = 1) coherent buffer Rb { uint route[]; };
layout(push_constant) uniform P {
  uint rows, experts, k, normalize;
  float scaling;
  uint tiles0, rows_per_tile0, tiles1, rows_per_tile1;  // per GEMM shape: workgroups = tiles * ceil(n / rows_per_tile)
  uint max_x;                                           // maxComputeWorkGroupCount[0]
} p;

void main() {
  const uint tid = gl_LocalInvocationID.x, a_count = p.rows * p.k;
  const uint W = a_count, MP = 2u * a_count, MW = 3u * a_count, ORDER = 4u * a_count, SE = 5u * a_count,
             EXP = 6u * a_count,
             CMD = EXP + 2u * p.experts;
  for (uint r = tid; r < p.rows; r += 256u) {
    const uint b = r * p.experts;
    float mx = probs[b];
    for (uint e = 1u; e < p.experts; ++e) mx = max(mx, probs[b + e]);
    precise float sum = 0.0;
    for (uint e = 0u; e < p.experts; ++e) {
      const float v = exp(probs[b + e] - mx);
      probs[b + e] = v;
      sum += v;
    }
    for (uint e = 0u; e < p.experts; ++e) probs[b + e] = probs[b + e] / sum;
    // Greedy top-k as a walk down the order (score desc, index asc): pick j is the best expert
    // after pick j-1 in that order, so no expert is picked twice.
    float last = 0.0;
    uint last_e = 0u;
    precise float picked = 0.0;
    for (uint j = 0u; j < p.k; ++j) {
      uint best = p.experts;
      float bv = 0.0;
      for (uint e = 0u; e < p.experts; ++e) {
        const float v = probs[b + e];
        const bool after = j == 0u || v < last || (v == last && e > last_e);
        if (after && (best == p.experts || v > bv)) {
          best = e;
          bv = v;
        }
      }
      route[r * p.k + j] = best;
      route[W + r * p.k + j] = floatBitsToUint(bv);
      picked += bv;
      last = bv;
      last_e = best;
    }
    for (uint j = 0u; j < p.k; ++j) {
      const float w = uintBitsToFloat(route[W + r * p.k + j]);
      route[W + r * p.k + j] = floatBitsToUint((p.normalize != 0u && p.k > 1u ? w / (picked + 1e-20) : w) * p.scaling);
    }
  }
  memoryBarrierBuffer();
  barrier();

  // Counting sort by expert (one thread per expert, assignments in ascending order, as the CPU).
  for (uint e = tid; e < p.experts; e += 256u) {
    uint n = 0u;
    for (uint a = 0u; a < a_count; ++a) n += route[a] == e ? 1u : 0u;
    route[EXP + 2u * e + 1u] = n;
  }
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) {
    uint at = 0u;
    for (uint e = 0u; e < p.experts; ++e) {
      route[EXP + 2u * e] = at;
      at += route[EXP + 2u * e + 1u];
    }
  }
  memoryBarrierBuffer();
  barrier();
  for (uint e = tid; e < p.experts; e += 256u) {
    const uint n = route[EXP + 2u * e + 1u];
    uint slot = route[EXP + 2u * e];
    for (uint a = 0u; a < a_count; ++a)
      if (route[a] == e) {
        route[ORDER + slot] = a / p.k;
        route[SE + slot] = e;
        route[MP + a] = slot++;  // slot of assignment a; sorted per row below
      }
    for (uint s = 0u; s < 2u; ++s) {
      const uint tiles = s == 0u ? p.tiles0 : p.tiles1, per = s == 0u ? p.rows_per_tile0 : p.rows_per_tile1;
      const uint groups = n == 0u ? 0u : tiles * ((n + per - 1u) / per);
      const uint ny = max(1u, (groups + p.max_x - 1u) / p.max_x);  // Context::grid's split
      const uint c = CMD + (2u * e + s) * 3u;
      route[c] = (groups + ny - 1u) / ny;
      route[c + 1u] = ny;
      route[c + 2u] = 1u;
    }
  }
  memoryBarrierBuffer();
  barrier();

  // Row r's (slot, weight) pairs in ascending expert order: expert regions are laid out in
  // expert order, so this is an insertion sort of its k picks by slot.
  for (uint r = tid; r < p.rows; r += 256u) {
    const uint b = r * p.k;
    for (uint j = 0u; j < p.k; ++j) {
      const uint s = route[MP + b + j], w = route[W + b + j];
      uint i = j;
      for (; i > 0u && route[MP + b + i - 1u] > s; --i) {
        route[MP + b + i] = route[MP + b + i - 1u];
        route[MW + b + i] = route[MW + b + i - 1u];
      }
      route[MP + b + i] = s;
      route[MW + b + i] = w;
    }
  }
}
