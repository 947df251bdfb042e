// The GEMM of a few rows of A on a row-major B: C[m, :] = epilogue(A[m, :]
// @ B) for M = 1 to kGemvRowMajorMaxM, B[K, N] stored row by row, i.e.
// `x @ W` at decode-sized M for a weight kept [in, out] (GPT-2's Conv1D, a
// hand-written `x @ W`). gemv_kmajor.h's kernel reads a K-major weight; this one
// reads B in place instead of packing it K-major first, which at a few rows
// would cost more than the product itself. Its configuration and launcher;
// the kernel is in gemv_rowmajor.cu, the rule that picks it in dispatch.cu.
#pragma once

#include <cstdint>

#include "cuda/decode/few_rows.cuh"
#include "cuda/gemm_problem.h"
#include "cuda/common/int_math.h"

namespace pygpukit {

// CTAs per SM that the kernel for kRows rows of A is built for (below).
constexpr int gemv_rowmajor_ctas_per_sm(int kRows) { return kRows <= 2 ? 4 : kRows == 4 ? 3 : 2; }

// A CTA owns kCols adjacent columns of C for kRows rows of A: its 32 lanes
// read 4 columns each (16-byte loads), so every load instruction of a warp
// reads 512 contiguous bytes of one row of B, and its warps take interleaved
// groups of kRowsInFlight rows. Each lane loads its kRowsInFlight chunks
// before their FMAs, and every chunk feeds all kRows rows of A:
// kWarps x kRowsInFlight x 512 bytes (32 KB) of B in flight per CTA. As in
// gemv_kmajor.h, B's bytes, read once, bound the kernel; A is M x K floats,
// broadcast to the warp from L1. K is cut into splits (grid.y) when the
// column blocks alone leave SMs idle; their partial sums go through
// splitk_reduce (fixed order, deterministic).
template <int kRows_>
struct GemvRowMajorConfig {
  // Rows of A per CTA, all sharing each load of B: 1, 2, 4, 8 or 16
  // (rows_per_cta); rows past M repeat row M - 1 and are not stored
  // (no predicates in the mainloop).
  static constexpr int kRows = kRows_;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kCols = 32 * 4;
  static constexpr int kRowsInFlight = 8;
  static constexpr int kRowsPerStep = kWarps * kRowsInFlight;  // rows of B per CTA step
  // Declared to ptxas (launch bounds). One row: without it, ptxas kept 40
  // registers and issued each row's load just before its FMAs, two loads in
  // flight instead of kRowsInFlight; with it, 61 registers and all loads
  // first. More rows hold 4 x kRows accumulators per lane: 4 rows get 3
  // CTAs per SM (at 4, 64 registers, ptxas spilled for sm_80), 8 and 16
  // rows 2 (128 registers), which still keeps 64 KB of B in flight per SM.
  static constexpr int kMinCtasPerSm = gemv_rowmajor_ctas_per_sm(kRows);

  static constexpr int64_t col_blocks(int64_t N) { return ceil_div(N, kCols); }
  // K-rows per split: whole CTA steps, as even as that allows.
  static constexpr int64_t rows_per_split(int64_t K, int splits) {
    return round_up(ceil_div(K, splits), kRowsPerStep);
  }
};
// What the dispatcher sizes with: every kRows has the same columns and steps.
using GemvRowMajorShape = GemvRowMajorConfig<1>;

// Requires batch == 1, 1 <= M <= kGemvRowMajorMaxM, N, K >= 1, A
// row-major with each row contiguous along K, B row-major with B 16-byte
// aligned and ldb a multiple of 4; for M > 1 also A 16-byte aligned and lda
// a multiple of 4 (A is read in 16-byte chunks then; one row is read float
// by float, lda unread). Any N (the last chunk of a row is read with scalar
// loads) and K; any epilogue. Deterministic: with one row each lane keeps
// two running sums per column (rows alternating between them), with more
// one per row and column, to which each group of kRowsInFlight rows of B is
// added as its own sum; then the warps' sums are added in warp order and
// the splits in split order; no atomics. FP32 throughout, no TF32 rounding,
// for every precision (see gemv_kmajor.h). splits: 1 to kGemvRowMajorMaxSplits
// K-ranges; with splits > 1, `partials` must hold splitk_partials_bytes
// (splits, M, N) bytes. More than kGemvRowMajorMaxRows rows run in blocks
// of that many, one launch (and pass over B) each, in row order, all at
// the same `splits`. Returns
// cudaErrorInvalidValue for M or a splits count out of range, or, for M >
// 1, A not 16-byte aligned.
constexpr int kGemvRowMajorMaxRows = 16;  // rows of A per CTA, at most
static_assert(rows_per_cta(kGemvRowMajorMaxRows) == kGemvRowMajorMaxRows,
              "the largest M has its own rows per CTA");
// Rows of A per call: 4 blocks. dispatch.cu's few_rows_gemv_max_m gives
// the blocks FP32 up to 32 rows and 3xTF32 up to 48 where the Hopper kernel
// that splits B in registers does not run (16 where it does), where they
// beat the FMA kernel and the staged 3xTF32 path (measured on the H200).
constexpr int kGemvRowMajorMaxM = 4 * kGemvRowMajorMaxRows;
constexpr int kGemvRowMajorMaxSplits = 32;
cudaError_t launch_gemv_rowmajor(const GemmProblem& problem, int splits, float* partials,
                                 cudaStream_t stream);

}  // namespace pygpukit
