// The GEMM of a few rows of A on a K-major B in FP32 (gemv_kmajor_rows.h): a warp
// per kWeightRows outputs and K-slice, lanes side by side along K, each
// chunk of A shared by the warp's weight rows, each chunk of the weight by
// all rows of A; the lanes summed with shuffles, the K-slices in shared
// memory. See "A few rows on a K-major weight" in
// docs/design.md.
#include "cuda/decode/gemv_kmajor_rows.h"

#include "cuda/common/epilogue.cuh"
#include "cuda/decode/few_rows.cuh"
#include "cuda/launch_util.h"
#include "cuda/common/load_chunk.cuh"
#include "cuda/common/ptx.cuh"

namespace pygpukit {
namespace {

// sum + x.e * w.e over the four elements e of the chunks, in order.
__device__ __forceinline__ float dot_chunk(float sum, uint4 x, uint4 w) {
  sum = fmaf(__uint_as_float(x.x), __uint_as_float(w.x), sum);
  sum = fmaf(__uint_as_float(x.y), __uint_as_float(w.y), sum);
  sum = fmaf(__uint_as_float(x.z), __uint_as_float(w.z), sum);
  return fmaf(__uint_as_float(x.w), __uint_as_float(w.w), sum);
}

// One step of the warp from k0: this lane's kChunks chunks of each weight
// row (`w[r]` at the lane's column), then, kXRows rows of A at a time, their
// chunks and, row by row, the 4 x kChunks products per weight row summed on
// their own and added to the running sums. kTail: the slice's last, partial
// step, up to k_end, its chunks past k_end read as zeros (scalar loads);
// otherwise whole 16-byte chunks, the weight's marked evict-first (read
// once, it must not push A out of L1).
template <int kRows, bool kTail>
__device__ __forceinline__ void step(const GemmProblem& p, const float* const (&w)[4], int64_t k0,
                                     int64_t k_end, int lane, float (&acc)[kRows][4]) {
  using Cfg = GemvKMajorRowsConfig<kRows>;
  constexpr int kR = Cfg::kWeightRows, kC = Cfg::kChunks, kX = Cfg::kXRows;
  static_assert(kR == 4, "w holds kWeightRows pointers");
  static_assert(kRows % kX == 0, "whole batches of rows of A");
  uint4 wv[kR][kC];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int64_t k = k0 + 128 * c;
      wv[r][c] = kTail ? load_tail_chunk(w[r] + k, k_end - (k + 4 * lane))
                       : __ldcs(reinterpret_cast<const uint4*>(w[r] + k));
    }
  const float* x = p.A + k0 + 4 * lane;
#pragma unroll
  for (int m0 = 0; m0 < kRows; m0 += kX) {
    uint4 xv[kX][kC];
#pragma unroll
    for (int i = 0; i < kX; x = next_a_row(p, x, m0 + i), ++i)
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int64_t k = k0 + 128 * c;
        xv[i][c] = kTail ? load_tail_chunk(x + 128 * c, k_end - (k + 4 * lane))
                         : __ldg(reinterpret_cast<const uint4*>(x + 128 * c));
      }
#pragma unroll
    for (int i = 0; i < kX; ++i) {
      float group[kR] = {};
#pragma unroll
      for (int c = 0; c < kC; ++c)
#pragma unroll
        for (int r = 0; r < kR; ++r) group[r] = dot_chunk(group[r], xv[i][c], wv[r][c]);
#pragma unroll
      for (int r = 0; r < kR; ++r) acc[m0 + i][r] += group[r];
    }
  }
}

// CTA b: outputs from b x (kWarps / slices) x kWeightRows on, warp w taking
// weight-row group w / slices and K-slice w % slices.
template <int kRows>
__global__ void __launch_bounds__(GemvKMajorRowsConfig<kRows>::kThreads,
                                  GemvKMajorRowsConfig<kRows>::kMinCtasPerSm)
    gemv_kmajor_rows_kernel(const GemmProblem p, int slices) {
  using Cfg = GemvKMajorRowsConfig<kRows>;
  constexpr int kR = Cfg::kWeightRows;
  // Each warp's sums for its outputs (with more than one slice).
  __shared__ float partial[Cfg::kWarps][kRows][kR];
  ptx::programmatic_launch_start();  // launch_util.h, launch_kernel
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int groups = Cfg::kWarps / slices;
  const int group = warp / slices, slice = warp % slices;
  const int64_t n0 = (int64_t(blockIdx.x) * groups + group) * kR;
  const KSlice ks = lane_row_k_slice(p.K, slices, slice);
  const int64_t k_begin = ks.begin, k_end = ks.end;
  const float* w[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) w[r] = p.B + (n0 + r < p.N ? n0 + r : p.N - 1) * p.ldb + 4 * lane;

  float acc[kRows][kR] = {};
  const int64_t body_end = k_begin + (k_end - k_begin) / Cfg::kStepK * Cfg::kStepK;
#pragma unroll 1
  for (int64_t k0 = k_begin; k0 < body_end; k0 += Cfg::kStepK)
    step<kRows, false>(p, w, k0, k_end, lane, acc);
  if (body_end < k_end) step<kRows, true>(p, w, body_end, k_end, lane, acc);

  // The lanes' sums in a fixed butterfly: every lane ends with the totals.
#pragma unroll
  for (int m = 0; m < kRows; ++m)
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], offset);

  // Lane (m x kR + r) % 32 keeps output (m, n0 + r): stores spread over the
  // warp. Rows past M and outputs past N are dropped.
  if (slices == 1) {
#pragma unroll
    for (int m = 0; m < kRows; ++m)
#pragma unroll
      for (int r = 0; r < kR; ++r)
        if ((m * kR + r) % 32 == lane && m < p.M && n0 + r < p.N)
          p.C[m * p.ldc + n0 + r] = epilogue_value(p.epilogue, acc[m][r], n0 + r);
    return;
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m)
#pragma unroll
    for (int r = 0; r < kR; ++r)
      if ((m * kR + r) % 32 == lane) partial[warp][m][r] = acc[m][r];
  __syncthreads();
  // Thread t adds output t's slices in slice order, the same every run.
  for (int t = threadIdx.x; t < groups * kRows * kR; t += Cfg::kThreads) {
    const int g = t / (kRows * kR), m = t / kR % kRows, r = t % kR;
    const int64_t n = (int64_t(blockIdx.x) * groups + g) * kR + r;
    if (m >= p.M || n >= p.N) continue;
    float sum = partial[g * slices][m][r];
    for (int s = 1; s < slices; ++s) sum += partial[g * slices + s][m][r];
    p.C[m * p.ldc + n] = epilogue_value(p.epilogue, sum, n);
  }
}

template <int kRows>
cudaError_t launch_rows(const GemmProblem& p, int slices, cudaStream_t stream) {
  using Cfg = GemvKMajorRowsConfig<kRows>;
  return launch_kernel<gemv_kmajor_rows_kernel<kRows>>(dim3(unsigned(Cfg::ctas(p.N, slices))),
                                                dim3(Cfg::kThreads), KernelNeeds{}, stream, p, slices);
}

}  // namespace

cudaError_t launch_gemv_kmajor_rows(const GemmProblem& p, int slices, cudaStream_t stream) {
  const bool power_of_two = slices > 0 && (slices & (slices - 1)) == 0;
  if (!power_of_two || slices > kGemvKMajorRowsMaxSlices || p.M < 2 || p.M > kGemvKMajorRowsMaxRows)
    return cudaErrorInvalidValue;
  static_assert(rows_per_cta(kGemvKMajorRowsMaxRows) == kGemvKMajorRowsMaxRows, "the largest M has its own rows");
  return launch_for_rows<2>(p.M, [&](auto rows) { return launch_rows<rows()>(p, slices, stream); });
}

}  // namespace pygpukit
