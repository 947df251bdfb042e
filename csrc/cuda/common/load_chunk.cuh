// 16-byte chunk loads shared by the kernels that read their operands straight
// from global memory into registers (skinny_gemm.cu and the GEMVs: gemv_kmajor.cu,
// gemv_kmajor_rows.cu, gemv_rowmajor.cu).
#pragma once

#include <cstdint>

#include "cuda/common/int_math.h"

namespace pygpukit {

// The chunk of 4 floats at `p`, of which only the first `left` lie inside
// K (the others, and all when left <= 0, are zeros). For the last chunks of
// a row, the K tail: the scalar loads keep it from reading past the end of a
// row whose K is not a multiple of 4. `p` is 16-byte aligned when left >= 4.
__device__ __forceinline__ uint4 load_tail_chunk(const float* p, int64_t left) {
  if (left >= 4) return __ldg(reinterpret_cast<const uint4*>(p));
  uint4 v = make_uint4(0, 0, 0, 0);
  if (left > 0) v.x = __float_as_uint(__ldg(p));
  if (left > 1) v.y = __float_as_uint(__ldg(p + 1));
  if (left > 2) v.z = __float_as_uint(__ldg(p + 2));
  return v;
}

// The K range [begin, end) of K-slice `slice` of `slices` (the K-major
// GEMVs): whole 512-byte rows of a warp's 16-byte lane chunks, so every
// slice starts 16-byte aligned, as even as that allows; the last slices may
// be shorter or empty.
struct KSlice {
  int64_t begin, end;
};
__device__ __forceinline__ KSlice lane_row_k_slice(int64_t K, int slices, int slice) {
  const int64_t length = ceil_div(ceil_div(K, slices), 128) * 128;
  const int64_t begin = slice * length < K ? slice * length : K;
  return {begin, begin + length < K ? begin + length : K};
}

}  // namespace pygpukit
