// The single-row GEMM (GEMV): C[0, :] = epilogue(A[0, :] @ B) with B K-major,
// i.e. x @ weight.T of nn.Linear for one token, in FP32 FMAs on the CUDA
// cores. Its configuration and launcher; the kernel is in gemv_kmajor.cu, the rule
// that picks it in dispatch.cu.
#pragma once

#include <cstdint>

#include "cuda/gemm_problem.h"
#include "cuda/common/int_math.h"

namespace pygpukit {

// Each output n, the dot product of x with row n of the weight, is computed
// by kSlices warps of one CTA, one contiguous K-slice each, over the whole
// of K. A warp's 32 lanes read 16-byte chunks side by side, so every load
// instruction of a warp reads 512 contiguous bytes of one weight row, and a
// warp walks its slice of the row from start to end: long sequential
// streams, which DRAM serves best. One bound matters at one row of x: the
// weight's bytes, read once (x is K floats, re-read from L1/L2 by every
// warp). Slices exist for small N, where one warp per row would leave too
// few loads in flight to cover DRAM's latency.
template <int kSlices_>
struct GemvKMajorConfig {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kSlices = kSlices_;  // warps per output, one K-slice each
  static constexpr int kRowsPerCta = kWarps / kSlices;
  static_assert(kWarps % kSlices == 0, "a CTA holds whole rows");
  // 16-byte chunks per lane loaded before their FMAs: each warp has
  // kChunks x 512 bytes of the weight in flight.
  static constexpr int kChunks = 4;
  static_assert((kChunks & (kChunks - 1)) == 0, "the per-lane sums are added pairwise");
  static constexpr int kStepK = 32 * 4 * kChunks;  // K per step of a warp

  static constexpr int64_t ctas(int64_t N) { return ceil_div(N, kRowsPerCta); }
};

// Requires batch == 1, M == 1, N, K >= 1, A's row contiguous along K and B
// column-major (B(k, n) at B[n * ldb + k]; the layout fields are not read),
// A and B 16-byte aligned and ldb a multiple of 4. Any K (the tail's partial
// chunks are read with scalar loads), N and epilogue. Deterministic: each
// lane keeps 4 x kChunks running sums (by position in its step), added
// pairwise in a fixed order, then the lanes are added in a fixed butterfly
// and the K-slices in slice order; no atomics. FP32 throughout,
// no TF32 rounding, for every precision: at one row the tensor cores would
// save no time (the weight's bytes bound it) and only lose accuracy.
// slices: K-slices per output, 1, 2, 4 or 8 (kGemvKMajorMaxSlices); more slices
// for a small N (dispatch.cu's gemv_kmajor_choice). Returns cudaErrorInvalidValue
// for any other count.
constexpr int kGemvKMajorMaxSlices = 8;
cudaError_t launch_gemv_kmajor(const GemmProblem& problem, int slices, cudaStream_t stream);

}  // namespace pygpukit
