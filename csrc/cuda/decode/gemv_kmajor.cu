// The single-row GEMM (gemv_kmajor.h): kSlices warps per weight row, each one
// K-slice, lanes side by side along K, FP32 FMAs, the lanes summed with
// shuffles and the slices in shared memory. See "The GEMV (one row, K-major weight)" in
// docs/design.md.
#include "cuda/decode/gemv_kmajor.h"

#include "cuda/common/epilogue.cuh"
#include "cuda/launch_util.h"
#include "cuda/common/load_chunk.cuh"
#include "cuda/common/ptx.cuh"

namespace pygpukit {
namespace {

// acc.e += x.e * w.e for the four elements e of the chunks: four running
// sums, one per element position.
__device__ __forceinline__ void fma_chunk(float4& acc, uint4 x, uint4 w) {
  acc.x = fmaf(__uint_as_float(x.x), __uint_as_float(w.x), acc.x);
  acc.y = fmaf(__uint_as_float(x.y), __uint_as_float(w.y), acc.y);
  acc.z = fmaf(__uint_as_float(x.z), __uint_as_float(w.z), acc.z);
  acc.w = fmaf(__uint_as_float(x.w), __uint_as_float(w.w), acc.w);
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) gemv_kmajor_kernel(const GemmProblem p) {
  constexpr int kC = Cfg::kChunks;
  // Each slice's sum for each row of the CTA.
  __shared__ float partial[Cfg::kRowsPerCta][Cfg::kSlices];
  ptx::programmatic_launch_start();  // launch_util.h, launch_kernel
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row = warp / Cfg::kSlices, slice = warp % Cfg::kSlices;
  const int64_t n = int64_t(blockIdx.x) * Cfg::kRowsPerCta + row;
  const KSlice ks = lane_row_k_slice(p.K, Cfg::kSlices, slice);
  const int64_t k_begin = ks.begin, k_end = ks.end;
  // Rows past N repeat row N - 1: read, never stored.
  const float* const w = p.B + (n < p.N ? n : p.N - 1) * p.ldb + 4 * lane;
  const float* const x = p.A + 4 * lane;

  // 4 x kChunks running sums per lane (chunk c of each step, element e of
  // the chunk), each over only K / (512 kChunks) products: shorter chains
  // than one sum per lane, so less rounding error (a single chain was ~1.4x
  // cuBLAS FP32's error at K = 4096) and no serial dependence of the FMAs.
  float4 acc[kC];
#pragma unroll
  for (int c = 0; c < kC; ++c) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  // Whole steps: plain 16-byte loads, the weight's marked streaming
  // (evict-first) so that it does not push x out of L1.
  const int64_t body_end = k_begin + (k_end - k_begin) / Cfg::kStepK * Cfg::kStepK;
  for (int64_t k0 = k_begin; k0 < body_end; k0 += Cfg::kStepK) {
    uint4 xv[kC], wv[kC];
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      xv[c] = __ldg(reinterpret_cast<const uint4*>(x + k0 + 128 * c));
      wv[c] = __ldcs(reinterpret_cast<const uint4*>(w + k0 + 128 * c));
    }
#pragma unroll
    for (int c = 0; c < kC; ++c) fma_chunk(acc[c], xv[c], wv[c]);
  }
  // The slice's tail, less than one step: chunks past its end are zeros.
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    const int64_t k = body_end + 128 * c;
    const int64_t left = k_end - (k + 4 * lane);
    fma_chunk(acc[c], load_tail_chunk(x + k, left), load_tail_chunk(w + k, left));
  }
  // The lane's sums pairwise in a fixed order, then the 32 lanes' in a fixed
  // butterfly (every lane ends with the total).
  float sums[kC];
#pragma unroll
  for (int c = 0; c < kC; ++c) sums[c] = (acc[c].x + acc[c].y) + (acc[c].z + acc[c].w);
#pragma unroll
  for (int width = kC / 2; width > 0; width /= 2)
#pragma unroll
    for (int c = 0; c < width; ++c) sums[c] += sums[c + width];
  float total = sums[0];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);

  if constexpr (Cfg::kSlices == 1) {
    if (lane == 0 && n < p.N) p.C[n] = epilogue_value(p.epilogue, total, n);
  } else {
    if (lane == 0) partial[row][slice] = total;
    __syncthreads();
    // The slices added in slice order, the same every run.
    const int64_t n_out = int64_t(blockIdx.x) * Cfg::kRowsPerCta + threadIdx.x;
    if (threadIdx.x < Cfg::kRowsPerCta && n_out < p.N) {
      float sum = partial[threadIdx.x][0];
#pragma unroll
      for (int s = 1; s < Cfg::kSlices; ++s) sum += partial[threadIdx.x][s];
      p.C[n_out] = epilogue_value(p.epilogue, sum, n_out);
    }
  }
}

template <class Cfg>
cudaError_t launch(const GemmProblem& p, cudaStream_t stream) {
  return launch_kernel<gemv_kmajor_kernel<Cfg>>(dim3(unsigned(Cfg::ctas(p.N))), dim3(Cfg::kThreads),
                                                KernelNeeds{}, stream, p);
}

}  // namespace

cudaError_t launch_gemv_kmajor(const GemmProblem& p, int slices, cudaStream_t stream) {
  static_assert(GemvKMajorConfig<kGemvKMajorMaxSlices>::kRowsPerCta == 1, "the most slices fill a CTA");
  switch (slices) {
    case 1: return launch<GemvKMajorConfig<1>>(p, stream);
    case 2: return launch<GemvKMajorConfig<2>>(p, stream);
    case 4: return launch<GemvKMajorConfig<4>>(p, stream);
    case 8: return launch<GemvKMajorConfig<8>>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace pygpukit
