// The single-row GEMM on a row-major B (gemv_rowmajor.h): lanes side by side
// along N, warps over interleaved groups of K rows, FP32 FMAs, the warps'
// sums added in shared memory and K-splits by splitk_reduce. See "One row of
// x: the GEMV" in docs/tf32_tensorcore_design.md.
#include "gemv_rowmajor.h"

#include "epilogue.cuh"
#include "load_chunk.cuh"
#include "splitk_reduce.h"
#include "tile_raster.cuh"

namespace pygpukit {
namespace {

using Cfg = GemvRowMajorConfig;

// acc.e += x * w.e for the four columns e of the chunk.
__device__ __forceinline__ void fma_row(float4& acc, float x, uint4 w) {
  acc.x = fmaf(x, __uint_as_float(w.x), acc.x);
  acc.y = fmaf(x, __uint_as_float(w.y), acc.y);
  acc.z = fmaf(x, __uint_as_float(w.z), acc.z);
  acc.w = fmaf(x, __uint_as_float(w.w), acc.w);
}

// acc += x times this lane's chunk of B over the groups of kRowsInFlight
// rows from `first`, every kRowsPerStep rows, that lie whole before k_end,
// for a chunk whose 4 columns lie inside N: 16-byte loads, all of a group's
// loads before its FMAs (B's marked evict-first: read once, it must not push
// x out of the caches), no predicates (with them, ptxas branched around
// each load and its FMAs one at a time). Returns the first group not done.
__device__ __forceinline__ int64_t accumulate_whole_groups(const GemmProblem& p, const float* b,
                                                           int64_t first, int64_t k_end,
                                                           float4 (&acc)[2]) {
  constexpr int kR = Cfg::kRowsInFlight;
  int64_t k0 = first;
#pragma unroll 1
  for (; k0 + kR <= k_end; k0 += Cfg::kRowsPerStep) {
    const float* row = b + k0 * p.ldb;
    uint4 wv[kR];
    float xv[kR];
#pragma unroll
    for (int j = 0; j < kR; ++j, row += p.ldb) {
      wv[j] = __ldcs(reinterpret_cast<const uint4*>(row));
      xv[j] = __ldg(p.A + k0 + j);
    }
#pragma unroll
    for (int j = 0; j < kR; ++j) fma_row(acc[j % 2], xv[j], wv[j]);
  }
  return k0;
}

// The rest, one row at a time: a group cut by k_end (K's end), and every
// group of the one chunk per row that N's end cuts (cols_left = 1..3
// columns inside N, scalar loads). Same order of sums as above.
__device__ __forceinline__ void accumulate_rows_one_by_one(const GemmProblem& p, const float* b,
                                                           int64_t k0, int64_t k_end,
                                                           int64_t cols_left, float4 (&acc)[2]) {
#pragma unroll 1
  for (; k0 < k_end; k0 += Cfg::kRowsPerStep)
#pragma unroll 1
    for (int j = 0; j < Cfg::kRowsInFlight && k0 + j < k_end; ++j)
      fma_row(acc[j % 2], __ldg(p.A + k0 + j),
              load_tail_chunk(b + (k0 + j) * p.ldb, cols_left));
}

// Block (col_block, split): columns col_block * kCols .. + kCols - 1 over the
// K rows [split * rows_per_split, + rows_per_split). With one split it
// stores epilogue(sum) into C, otherwise the raw sum into row `split` of
// `partials` (leading dimension ldp).
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinCtasPerSm) gemv_rowmajor_kernel(const GemmProblem p,
                                                                      int64_t rows_per_split,
                                                                      float* partials,
                                                                      int64_t ldp) {
  __shared__ float warp_sums[Cfg::kWarps][Cfg::kCols];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t n0 = int64_t(blockIdx.x) * Cfg::kCols;
  const int64_t cols_left = p.N - (n0 + 4 * lane);  // of this lane's chunk inside N
  const int64_t k_begin = int64_t(blockIdx.y) * rows_per_split;
  const int64_t k_end = k_begin + rows_per_split < p.K ? k_begin + rows_per_split : p.K;
  const int64_t first = k_begin + warp * Cfg::kRowsInFlight;
  const float* const b = p.B + n0 + 4 * lane;

  // Two running sums per column, the rows of a group alternating between
  // them: half the chain length, and two independent FMA chains. Lanes past
  // N keep zeros and load nothing.
  float4 acc[2] = {make_float4(0.f, 0.f, 0.f, 0.f), make_float4(0.f, 0.f, 0.f, 0.f)};
  int64_t k0 = first;
  if (cols_left >= 4) k0 = accumulate_whole_groups(p, b, k0, k_end, acc);
  if (cols_left > 0) accumulate_rows_one_by_one(p, b, k0, k_end, cols_left, acc);
  const float4 sum = make_float4(acc[0].x + acc[1].x, acc[0].y + acc[1].y, acc[0].z + acc[1].z,
                                 acc[0].w + acc[1].w);
  reinterpret_cast<float4*>(warp_sums[warp])[lane] = sum;
  __syncthreads();
  // Thread t adds column t's warp sums in warp order, the same every run.
  if (threadIdx.x < Cfg::kCols) {
    const int64_t n = n0 + threadIdx.x;
    if (n >= p.N) return;
    float total = warp_sums[0][threadIdx.x];
#pragma unroll
    for (int w = 1; w < Cfg::kWarps; ++w) total += warp_sums[w][threadIdx.x];
    if (gridDim.y == 1) p.C[n] = epilogue_value(p.epilogue, total, n);
    else partials[int64_t(blockIdx.y) * ldp + n] = total;
  }
}

}  // namespace

cudaError_t launch_gemv_rowmajor(const GemmProblem& p, int splits, float* partials,
                                 cudaStream_t stream) {
  if (splits < 1 || splits > kGemvRowMajorMaxSplits) return cudaErrorInvalidValue;
  const int64_t rows = Cfg::rows_per_split(p.K, splits);
  splits = int(ceil_div(p.K, rows));  // no empty split
  const int64_t ldp = splitk_partials_ld(p.N);
  const dim3 grid(unsigned(Cfg::col_blocks(p.N)), unsigned(splits));
  gemv_rowmajor_kernel<<<grid, Cfg::kThreads, 0, stream>>>(p, rows, partials, ldp);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || splits == 1) return err;
  return launch_splitk_reduce(partials, splits, 1, p.N, ldp, p.C, p.ldc, p.epilogue, stream);
}

}  // namespace pygpukit
