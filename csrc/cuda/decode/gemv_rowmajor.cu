// The GEMM of a few rows of A on a row-major B (gemv_rowmajor.h): lanes side
// by side along N, warps over interleaved groups of K rows, every chunk of B
// loaded once for all rows of A, FP32 FMAs, the warps' sums added in shared
// memory and K-splits by splitk_reduce. See "Rows on a row-major weight" in
// docs/design.md.
#include "cuda/decode/gemv_rowmajor.h"

#include "cuda/common/epilogue.cuh"
#include "cuda/launch_util.h"
#include "cuda/common/load_chunk.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/splitk_reduce.h"
#include "cuda/common/tile_raster.cuh"

namespace pygpukit {
namespace {

// Running sums per row of A and column: two for one row, its rows of B
// alternating between them (half the chain length, and two independent FMA
// chains); one with more rows, which are the independent chains already.
template <int kRows>
constexpr int kChains = kRows == 1 ? 2 : 1;

template <int kRows>
using Accumulators = float4[kRows][kChains<kRows>];

// a + b for each of the four columns.
__device__ __forceinline__ float4 plus(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// acc.e += x * w.e for the four columns e of the chunk.
__device__ __forceinline__ void fma_row(float4& acc, float x, uint4 w) {
  acc.x = fmaf(x, __uint_as_float(w.x), acc.x);
  acc.y = fmaf(x, __uint_as_float(w.y), acc.y);
  acc.z = fmaf(x, __uint_as_float(w.z), acc.z);
  acc.w = fmaf(x, __uint_as_float(w.w), acc.w);
}

// acc += A's rows times this lane's chunk of B over the groups of
// kRowsInFlight rows from `first`, every kRowsPerStep rows, that lie whole
// before k_end, for a chunk whose 4 columns lie inside N: 16-byte loads, all
// of a group's loads of B before its FMAs (marked evict-first: read once, B
// must not push A out of the caches), no predicates (with them, ptxas
// branched around each load and its FMAs one at a time). One row of A is
// read float by float (no alignment asked of it); more rows in 16-byte
// chunks, 2 x kRows loads per group instead of 8 x kRows. Returns the first
// group not done.
template <int kRows>
__device__ __forceinline__ int64_t accumulate_whole_groups(const GemmProblem& p, const float* b,
                                                           int64_t first, int64_t k_end,
                                                           Accumulators<kRows>& acc) {
  using Cfg = GemvRowMajorConfig<kRows>;
  constexpr int kR = Cfg::kRowsInFlight;
  static_assert(kR % 4 == 0, "a group's k-range of A is whole 16-byte chunks");
  int64_t k0 = first;
#pragma unroll 1
  for (; k0 + kR <= k_end; k0 += Cfg::kRowsPerStep) {
    const float* row = b + k0 * p.ldb;
    uint4 wv[kR];
    float xv[kR];  // one row of A: its values, loaded with B's
#pragma unroll
    for (int j = 0; j < kR; ++j, row += p.ldb) {
      wv[j] = __ldcs(reinterpret_cast<const uint4*>(row));
      if constexpr (kRows == 1) xv[j] = __ldg(p.A + k0 + j);
    }
    if constexpr (kRows == 1) {
#pragma unroll
      for (int j = 0; j < kR; ++j) fma_row(acc[0][j % 2], xv[j], wv[j]);
    } else {
      // Row by row, each row's chunks of A just before its FMAs: all of
      // them first would hold 8 x kRows more registers (ptxas spilled).
      // One pointer walks down A's rows (kRows pointers set up outside the
      // loop took 2 x kRows registers, and spilled).
      // Each row's group is summed on its own, then added to the running
      // sum: two chains of kRowsInFlight and rows / (kWarps x
      // kRowsInFlight) additions instead of one of rows / kWarps (64 at
      // 16 x 4096 x 4096), so about the one-row kernel's rounding error.
      const float* x_row = p.A + k0;
#pragma unroll
      for (int m = 0; m < kRows; x_row = next_a_row(p, x_row, m), ++m) {
        float4 group = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int j = 0; j < kR; j += 4) {
          const float4 x = __ldg(reinterpret_cast<const float4*>(x_row + j));
          fma_row(group, x.x, wv[j]);
          fma_row(group, x.y, wv[j + 1]);
          fma_row(group, x.z, wv[j + 2]);
          fma_row(group, x.w, wv[j + 3]);
        }
        acc[m][0] = plus(acc[m][0], group);
      }
    }
  }
  return k0;
}

// The rest, one row of B at a time: a group cut by k_end (K's end), and
// every group of the one chunk per row that N's end cuts (cols_left = 1..3
// columns inside N, scalar loads). Same order of sums as above.
template <int kRows>
__device__ __forceinline__ void accumulate_rows_one_by_one(const GemmProblem& p, const float* b,
                                                           int64_t k0, int64_t k_end,
                                                           int64_t cols_left,
                                                           Accumulators<kRows>& acc) {
  using Cfg = GemvRowMajorConfig<kRows>;
#pragma unroll 1
  for (; k0 < k_end; k0 += Cfg::kRowsPerStep)
#pragma unroll 1
    for (int j = 0; j < Cfg::kRowsInFlight && k0 + j < k_end; ++j) {
      const uint4 w = load_tail_chunk(b + (k0 + j) * p.ldb, cols_left);
      const float* x_row = p.A + k0 + j;
#pragma unroll
      for (int m = 0; m < kRows; x_row = next_a_row(p, x_row, m), ++m)
        fma_row(acc[m][j % kChains<kRows>], __ldg(x_row), w);
    }
}

// Block (col_block, split): columns col_block * kCols .. + kCols - 1 of
// min(M, kRows) rows over the K rows [split * rows_per_split, +
// rows_per_split). With one split it stores epilogue(sum) into C, otherwise
// the raw sums into rows split * M + m of `partials` (leading dimension
// ldp).
template <int kRows>
__global__ void __launch_bounds__(GemvRowMajorConfig<kRows>::kThreads,
                                  GemvRowMajorConfig<kRows>::kMinCtasPerSm)
    gemv_rowmajor_kernel(const GemmProblem p, int64_t rows_per_split, float* partials,
                         int64_t ldp) {
  using Cfg = GemvRowMajorConfig<kRows>;
  __shared__ float warp_sums[Cfg::kWarps][Cfg::kCols];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t n0 = int64_t(blockIdx.x) * Cfg::kCols;
  const int64_t cols_left = p.N - (n0 + 4 * lane);  // of this lane's chunk inside N
  const int64_t k_begin = int64_t(blockIdx.y) * rows_per_split;
  const int64_t k_end = k_begin + rows_per_split < p.K ? k_begin + rows_per_split : p.K;
  const int64_t first = k_begin + warp * Cfg::kRowsInFlight;
  const float* const b = p.B + n0 + 4 * lane;
  ptx::programmatic_launch_start();  // before reading x or W (launch_util.h, launch_kernel)

  // Lanes past N keep zeros and load nothing.
  Accumulators<kRows> acc;
#pragma unroll
  for (int m = 0; m < kRows; ++m)
#pragma unroll
    for (int c = 0; c < kChains<kRows>; ++c) acc[m][c] = make_float4(0.f, 0.f, 0.f, 0.f);
  int64_t k0 = first;
  if (cols_left >= 4) k0 = accumulate_whole_groups<kRows>(p, b, k0, k_end, acc);
  if (cols_left > 0) accumulate_rows_one_by_one<kRows>(p, b, k0, k_end, cols_left, acc);

  // Row by row through one shared buffer (kRows buffers would take 64 KB at
  // 16 rows): thread t adds column t's warp sums in warp order, the same
  // every run.
  const int stored_rows = p.M < kRows ? int(p.M) : kRows;
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if (m == stored_rows) break;
    float4 sum = acc[m][0];
    if constexpr (kChains<kRows> == 2)
      sum = plus(sum, acc[m][1]);
    if (m > 0) __syncthreads();  // row m - 1's sums are read
    reinterpret_cast<float4*>(warp_sums[warp])[lane] = sum;
    __syncthreads();
    const int64_t n = n0 + threadIdx.x;
    if (threadIdx.x < Cfg::kCols && n < p.N) {
      float total = warp_sums[0][threadIdx.x];
#pragma unroll
      for (int w = 1; w < Cfg::kWarps; ++w) total += warp_sums[w][threadIdx.x];
      if (gridDim.y == 1) p.C[m * p.ldc + n] = epilogue_value(p.epilogue, total, n);
      else partials[(int64_t(blockIdx.y) * p.M + m) * ldp + n] = total;
    }
  }
}

template <int kRows>
cudaError_t launch_rows(const GemmProblem& p, int splits, float* partials, cudaStream_t stream) {
  using Cfg = GemvRowMajorConfig<kRows>;
  const int64_t rows = Cfg::rows_per_split(p.K, splits);
  splits = int(ceil_div(p.K, rows));  // no empty split
  const int64_t ldp = splitk_partials_ld(p.N);
  const dim3 grid(unsigned(Cfg::col_blocks(p.N)), unsigned(splits));
  cudaError_t err = launch_kernel<gemv_rowmajor_kernel<kRows>>(grid, dim3(Cfg::kThreads), KernelNeeds{}, stream,
                                                                p, rows, partials, ldp);
  if (err != cudaSuccess || splits == 1) return err;
  return launch_splitk_reduce(partials, splits, p.M, p.N, ldp, p.C, p.ldc, p.epilogue, stream);
}

}  // namespace

cudaError_t launch_gemv_rowmajor(const GemmProblem& p, int splits, float* partials,
                                 cudaStream_t stream) {
  if (splits < 1 || splits > kGemvRowMajorMaxSplits || p.M < 1 || p.M > kGemvRowMajorMaxM)
    return cudaErrorInvalidValue;
  const bool a_aligned = reinterpret_cast<uintptr_t>(p.A) % 16 == 0 && p.lda % 4 == 0;
  if (p.M > 1 && !a_aligned) return cudaErrorInvalidValue;
  // Blocks of rows in row order on one stream: each block's split-K pass
  // has read the partials before the next block's kernel writes them.
  return launch_row_blocks(p, kGemvRowMajorMaxRows, [&](const GemmProblem& block) {
    return launch_for_rows<1>(
        block.M, [&](auto rows) { return launch_rows<rows()>(block, splits, partials, stream); });
  });
}

}  // namespace pygpukit
