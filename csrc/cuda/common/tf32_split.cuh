// The 3xTF32 split of one FP32 value, shared by the pack kernel (which writes
// the parts to memory) and the kernels that split in registers (skinny, and
// the Hopper kernel's WgmmaSplit3SwapAB).
#pragma once

#include <cstdint>

namespace pygpukit {

// x = big + small, big = tf32(x) rounded to nearest (ties to even), exact in
// FP32, so small = x - big is exact too. `corr` is what multiplies the other
// operand's small part: big for a finite x, 0 for Inf or NaN, whose small
// part is 0 as well, so that Inf and NaN enter only big * big (0 * Inf in a
// correction term would be NaN where torch.matmul gives Inf). A finite value
// that would round past FLT_MAX is truncated instead, so big stays finite,
// and so is its small part: rounded to nearest later (the kernels round
// small to TF32 as they load it), x - big could round up by the step that
// takes big + small to 2^128, and FLT_MAX * 1 would come out as Inf.
struct Tf32Parts {
  float big, small, corr;
};

constexpr uint32_t kTf32Bits = 0xFFFFE000u;  // sign, exponent, 10 mantissa bits

// A value below this magnitude is finite and its rounding to nearest TF32
// cannot carry past FLT_MAX (0x7F7FF000 is the first that would), so its
// split needs none of the special cases; in practice that is every value,
// and kernels that test for it once per fragment run the short form
// (tf32_split_plain) and keep tf32_split for fragments that need it.
__device__ __forceinline__ bool tf32_split_is_plain(float x) {
  return fabsf(x) < __uint_as_float(0x7F7FF000u);
}

// tf32_split(x) for an x with tf32_split_is_plain(x): the same parts.
__device__ __forceinline__ Tf32Parts tf32_split_plain(float x) {
  const uint32_t bits = __float_as_uint(x);
  const float big = __uint_as_float((bits + 0xFFFu + ((bits >> 13) & 1u)) & kTf32Bits);
  return {big, x - big, big};
}

__device__ __forceinline__ Tf32Parts tf32_split(float x) {
  if (tf32_split_is_plain(x)) return tf32_split_plain(x);
  if (!isfinite(x)) return {x, 0.0f, 0.0f};
  const float big = __uint_as_float(__float_as_uint(x) & kTf32Bits);
  return {big, __uint_as_float(__float_as_uint(x - big) & kTf32Bits), big};
}

// One value's 3xTF32 parts as tensor-core operand registers. small is finite
// (0 for Inf and NaN), so rounding it to nearest TF32 (ties away) is adding
// half a TF32 ulp: the MMAs ignore the 13 low bits. kPlain: v passed
// tf32_split_is_plain.
template <bool kPlain>
__device__ __forceinline__ void tf32_split_operand(uint32_t v, uint32_t& big, uint32_t& small,
                                                   uint32_t& corr) {
  const Tf32Parts x = kPlain ? tf32_split_plain(__uint_as_float(v)) : tf32_split(__uint_as_float(v));
  big = __float_as_uint(x.big);
  small = __float_as_uint(x.small) + 0x1000u;
  corr = __float_as_uint(x.corr);
}

}  // namespace pygpukit
