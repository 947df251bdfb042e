// The plain FP32 GEMM (FMA on CUDA cores, no tensor cores), used when TF32 is
// not allowed (precision "ieee") and on GPUs older than sm_80: its tile
// configurations and launcher.
#pragma once

#include "cuda/gemm_problem.h"
#include "cuda/common/int_math.h"

namespace pygpukit {

// Threadblock tile BM x BN x BK on 256 threads (16 x 16), each computing a
// kThreadRows x kThreadCols block of C in registers: groups of 4 rows (4
// columns) spaced 64 apart, so that one 16-byte shared-memory load feeds
// each group. The operand tiles are double-buffered in shared memory, and
// the next k-tile's global loads are in flight while this one's FMAs run.
// kMinBlocksPerSM is the __launch_bounds__ minimum (registers per thread at
// most 65536 / (kMinBlocksPerSM * 256)).
template <int kThreadRows_, int kThreadCols_, int BK_, int kMinBlocksPerSM_>
struct FmaConfig {
  static constexpr int kThreadRows = kThreadRows_, kThreadCols = kThreadCols_;
  static constexpr int kThreads = 256;
  static constexpr int BM = 16 * kThreadRows, BN = 16 * kThreadCols, BK = BK_;
  static constexpr int kMinBlocksPerSM = kMinBlocksPerSM_;
  static_assert(kThreadRows % 4 == 0 && kThreadCols % 4 == 0, "whole 16-byte groups per thread");
  static_assert((BM * BK) % kThreads == 0 && (BN * BK) % kThreads == 0,
                "every thread loads the same number of operand elements");

  static constexpr int64_t tiles(int64_t M, int64_t N) {
    return ceil_div(M, BM) * ceil_div(N, BN);
  }
};

// 128x128x8, 8x8 outputs per thread (64 FMAs per pair of 16-byte loads of
// each operand), two CTAs per SM.
using FmaLarge = FmaConfig<8, 8, 8, 2>;
// 64x64x16, 4x4 per thread: a quarter of the large tile's rows and columns,
// for outputs with few rows or columns, where the large tile would compute
// mostly padding.
using FmaSmall = FmaConfig<4, 4, 16, 3>;

// Any layout, alignment and size (M, N, K >= 1). Each product is one IEEE
// FP32 fused multiply-add, accumulated over K in order. splits > 1 (batch
// 1 only, else cudaErrorInvalidValue) cuts K into that many ranges of
// round_up(ceil(K / splits), BK) columns: each range's sums go to
// `partials` (splits x M x splitk_partials_ld(N) floats, 16-byte aligned,
// from the caller's workspace), and the split-K reduction (splitk_reduce.h)
// adds them in range order and applies the epilogue, so results are
// bitwise reproducible.
template <class Config>
cudaError_t launch_fma_gemm(const GemmProblem& problem, int splits, float* partials,
                            cudaStream_t stream);

}  // namespace pygpukit
