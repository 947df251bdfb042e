// The second pass of split-K: sums the per-split partial products in a fixed
// order and applies the epilogue, so results are bitwise reproducible.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/gemm_problem.h"
#include "cuda/common/int_math.h"

namespace pygpukit {

// Row stride, in floats, of the partial products: N rounded up to 4, which
// keeps every row 16-byte aligned for the TMA stores that write them.
__host__ __device__ inline int64_t splitk_partials_ld(int64_t N) { return round_up(N, 4); }

// Bytes of the partial products of `splits` K-ranges of an M x N output
// (splits x M x splitk_partials_ld(N) floats); 0 for one range.
inline size_t splitk_partials_bytes(int splits, int64_t M, int64_t N) {
  return splits > 1 ? size_t(splits * M * splitk_partials_ld(N) * 4) : 0;
}

// C[m, n] = epilogue(sum over s = 0, 1, ..., splits - 1 of
// partials[s][m][n]), partials being splits x M x ldp floats (ldp =
// splitk_partials_ld(N)) and C row-major with leading dimension ldc.
// Launched programmatically where the GPU and the build allow it
// (kernel_setup.h, KernelReady::programmatic): it waits for the previous
// kernel's writes before reading the partials.
cudaError_t launch_splitk_reduce(const float* partials, int splits, int64_t M, int64_t N,
                                 int64_t ldp, float* C, int64_t ldc, const Epilogue& epilogue,
                                 cudaStream_t stream);

}  // namespace pygpukit
