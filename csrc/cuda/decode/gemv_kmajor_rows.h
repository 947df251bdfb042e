// The GEMM of a few rows of A on a K-major B in FP32: C = epilogue(A @ B)
// for M = 2 to kGemvKMajorRowsMaxRows with B(k, n) at B[n * ldb + k], i.e.
// x @ weight.T of nn.Linear at decode-sized M, on the CUDA cores. gemv_kmajor.h's
// kernel serves one row; this one shares every load of A among several
// weight rows and every load of the weight among all rows of A. Its
// configuration and launcher; the kernel is in gemv_kmajor_rows.cu, the rule that
// picks it in dispatch.cu.
#pragma once

#include <cstdint>

#include "cuda/gemm_problem.h"
#include "cuda/common/int_math.h"

namespace pygpukit {

// A warp computes kWeightRows adjacent outputs n for all kRows rows of A
// over one K-slice: its lanes read 16-byte chunks side by side along K (512
// contiguous bytes of a weight row per load instruction), kChunks per
// weight row and step, all before their FMAs, and each chunk of A they load
// feeds kWeightRows weight rows. As in gemv_kmajor.h the weight's bytes, read once,
// bound it; A's chunks come from L1, kRows / kWeightRows times the weight's
// bytes (4x at 16 rows, within L1's bandwidth). A CTA's 8 warps take
// `slices` K-slices (runtime: 1, 2, 4 or 8) of 8 / slices groups of
// weight rows; the slices' sums are added in shared memory.
template <int kRows_>
struct GemvKMajorRowsConfig {
  static constexpr int kRows = kRows_;  // 2, 4, 8 or 16 (rows_per_cta)
  static constexpr int kWeightRows = 4;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  // Per lane: kRows x kWeightRows sums, the weight's kWeightRows x kChunks
  // chunks (in flight together) and A's kRows row addresses, which the
  // compiler keeps across the K loop. At 16 rows that is 64 + 16 + 32
  // registers with one chunk per weight row (two spilled ~200 bytes); with
  // 2 CTAs per SM that still keeps 32 KB of the weight in flight per SM.
  static constexpr int kChunks = kRows == 16 ? 1 : 2;
  // Rows of A whose chunks a step loads together, before their FMAs. Row
  // by row, ptxas gave every row the same registers, so each row's load
  // waited for the last row's FMAs and paid its latency (A comes mostly
  // from L2: each CTA reads all of it once) kRows times per step. In
  // batches of 4 rows (16 x kChunks registers) ptxas, at its 128-register
  // cap, still keeps only 1-2 rows' loads ahead at 8 and 16 rows: 5-9%
  // faster there on the H200 (2026-12-01), 8 rows still at 2.7-3.2 TB/s
  // and 16 at 1.0-1.3 (which the automatic choice takes only for FP32).
  // An L1 prefetch of the next step's rows of A helped 16 rows only
  // (another 4-20%) and slowed the others; it was left out, as was staging
  // A in shared memory (slower below 16 rows; design doc).
  static constexpr int kXRows = kRows < 4 ? kRows : 4;
  static constexpr int kStepK = 32 * 4 * kChunks;  // K per step of a warp
  static constexpr int kMinCtasPerSm = 2;

  static constexpr int64_t ctas(int64_t N, int slices) {
    const int64_t outputs = int64_t{kWarps / slices} * kWeightRows;  // per CTA
    return ceil_div(N, outputs);
  }
};

// Requires batch == 1, 2 <= M <= kGemvKMajorRowsMaxRows, N, K >= 1, A row-major
// and B column-major (A(m, k) at A[m * lda + k], B(k, n) at B[n * ldb + k];
// the layout fields are not read), A and B 16-byte aligned and lda, ldb
// multiples of 4. Any K (the tail's partial chunks are read with scalar
// loads), N and epilogue. Rows of A past M in a CTA's kRows repeat row
// M - 1 and weight rows past N repeat row N - 1: read, never stored.
// Deterministic: per lane, each step's 4 x kChunks products for an output
// are summed on their own and then added to its running sum; the lanes are
// added in a fixed butterfly and the K-slices in slice order; no atomics.
// FP32 throughout, no TF32 rounding, for every precision. slices: 1, 2, 4
// or 8 K-slices per output (kGemvKMajorRowsMaxSlices). Returns
// cudaErrorInvalidValue for M or a slice count out of range.
constexpr int kGemvKMajorRowsMaxRows = 16;
constexpr int kGemvKMajorRowsMaxSlices = 8;
cudaError_t launch_gemv_kmajor_rows(const GemmProblem& problem, int slices, cudaStream_t stream);

}  // namespace pygpukit
