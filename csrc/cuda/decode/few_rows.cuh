// What the FP32 kernels for a few rows of A share (gemv_rowmajor.cu,
// gemv_kmajor_rows.cu): how many rows of A a CTA computes for M, and the walk down
// A's rows that fills those past M.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include "cuda/gemm_problem.h"

namespace pygpukit {

// Rows of A per CTA for M rows (1 <= M <= 16): the fewest of 1, 2, 4, 8, 16
// that cover M. Each is its own kernel instantiation.
constexpr int rows_per_cta(int64_t M) { return M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : M <= 8 ? 8 : 16; }

// Returns launch(std::integral_constant<int, kRows>{}) for kRows =
// rows_per_cta(M), the kernel instantiation for M rows (1 <= M <= 16); tiers
// below kMinRows (a kernel that has no 1-row form) are not instantiated.
// An M outside those gives cudaErrorInvalidValue: the 16-row kernel would
// store only 16 rows.
template <int kMinRows, class Launch>
cudaError_t launch_for_rows(int64_t M, Launch&& launch) {
  if (M < kMinRows || M > 16) return cudaErrorInvalidValue;
  switch (rows_per_cta(M)) {
    case 1:
      if constexpr (kMinRows <= 1) return launch(std::integral_constant<int, 1>{});
      break;
    case 2: return launch(std::integral_constant<int, 2>{});
    case 4: return launch(std::integral_constant<int, 4>{});
    case 8: return launch(std::integral_constant<int, 8>{});
    case 16: return launch(std::integral_constant<int, 16>{});
  }
  return cudaErrorInvalidValue;
}

// From `x`, in row m of A, to the same column of row m + 1; the rows past M
// that fill a CTA's rows repeat row M - 1 (computed, never stored), so the
// mainloops need no predicates.
__device__ __forceinline__ const float* next_a_row(const GemmProblem& p, const float* x, int m) {
  return m + 1 < p.M ? x + p.lda : x;
}

}  // namespace pygpukit
