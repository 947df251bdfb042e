// The single-row GEMM with a row-major B (GEMV): C[0, :] = epilogue(A[0, :]
// @ B) with B[K, N] stored row by row, i.e. `x @ W` for a weight kept
// [in, out] (GPT-2's Conv1D, a hand-written `x @ W`). gemv.h's kernel reads
// a K-major weight; this one reads B in place instead of packing it K-major
// first, which at one row would cost more than the GEMV itself. Its
// configuration and launcher; the kernel is in gemv_rowmajor.cu, the rule
// that picks it in dispatch.cu.
#pragma once

#include <cstdint>

#include "gemm_problem.h"

namespace pygpukit {

// A CTA owns kCols adjacent columns of C: its 32 lanes read 4 columns each
// (16-byte loads), so every load instruction of a warp reads 512 contiguous
// bytes of one row of B, and its warps take interleaved groups of
// kRowsInFlight rows. Each lane loads its kRowsInFlight chunks before their
// FMAs: kWarps x kRowsInFlight x 512 bytes (32 KB) of B in flight per CTA.
// As in gemv.h, B's bytes, read once, bound the kernel; x is K floats,
// broadcast to the warp from L1. K is cut into splits (grid.y) when the
// column blocks alone leave SMs idle; their partial sums go through
// splitk_reduce (fixed order, deterministic).
struct GemvRowMajorConfig {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kCols = 32 * 4;
  static constexpr int kRowsInFlight = 8;
  static constexpr int kRowsPerStep = kWarps * kRowsInFlight;  // rows of B per CTA step
  // Declared to ptxas (launch bounds): without it, ptxas kept 40 registers
  // and issued each row's load just before its FMAs, two loads in flight
  // instead of kRowsInFlight; with it, 61 registers and all loads first.
  static constexpr int kMinCtasPerSm = 4;

  static constexpr int64_t col_blocks(int64_t N) { return (N + kCols - 1) / kCols; }
  // K-rows per split: whole CTA steps, as even as that allows.
  static constexpr int64_t rows_per_split(int64_t K, int splits) {
    return ((K + splits - 1) / splits + kRowsPerStep - 1) / kRowsPerStep * kRowsPerStep;
  }
};

// Requires batch == 1, M == 1, N, K >= 1, A's row contiguous along K (A
// row-major; lda is not read), B row-major with B 16-byte aligned and ldb a
// multiple of 4. Any N (the last chunk of a row is read with scalar loads)
// and K; any epilogue. Deterministic: each lane keeps two running sums per
// column (rows alternating between them), added in a fixed order, then the
// warps' sums in warp order and the splits in split order; no atomics. FP32
// throughout, no TF32 rounding, for every precision (see gemv.h). splits:
// 1 to kGemvRowMajorMaxSplits K-ranges; with splits > 1, `partials` must
// hold splits x splitk_partials_ld(N) floats. Returns cudaErrorInvalidValue
// for a splits count out of range.
constexpr int kGemvRowMajorMaxSplits = 32;
cudaError_t launch_gemv_rowmajor(const GemmProblem& problem, int splits, float* partials,
                                 cudaStream_t stream);

}  // namespace pygpukit
