// 16-byte chunk loads shared by the kernels that read their operands straight
// from global memory into registers (skinny_gemm.cu and the GEMVs: gemv.cu,
// gemv_rows.cu, gemv_rowmajor.cu).
#pragma once

#include <cstdint>

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

}  // namespace pygpukit
