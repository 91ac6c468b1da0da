// Element e of a weight tensor stored in its checkpoint type, read from a uint[] buffer named
// `wdata` that the including shader declares. 16-bit types are two per word, element 0 in the
// low half (little-endian), so no 16-bit storage feature is needed. bf16 -> f32 is exact.
// w_pair(e) for even e: elements e and e + 1 in one 32-bit load for the 16-bit types.
#if defined(WEIGHT_BF16)
float w_at(uint e) {
  uint word = wdata[e >> 1];
  return uintBitsToFloat((e & 1u) != 0u ? (word & 0xffff0000u) : (word << 16));
}
vec2 w_pair(uint e) {
  uint word = wdata[e >> 1];
  return vec2(uintBitsToFloat(word << 16), uintBitsToFloat(word & 0xffff0000u));
}
#elif defined(WEIGHT_F16)
float w_at(uint e) {
  vec2 h = unpackHalf2x16(wdata[e >> 1]);
  return (e & 1u) != 0u ? h.y : h.x;
}
vec2 w_pair(uint e) { return unpackHalf2x16(wdata[e >> 1]); }
#elif defined(WEIGHT_F32)
float w_at(uint e) { return uintBitsToFloat(wdata[e]); }
vec2 w_pair(uint e) { return vec2(uintBitsToFloat(wdata[e]), uintBitsToFloat(wdata[e + 1u])); }
#else
#error "define WEIGHT_BF16, WEIGHT_F16 or WEIGHT_F32"
#endif
