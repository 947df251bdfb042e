#include "cuda/common/splitk_reduce.h"

#include "cuda/common/epilogue.cuh"
#include "cuda/common/int_math.h"
#include "cuda/launch_util.h"
#include "cuda/common/ptx.cuh"

namespace pygpukit {
namespace {

constexpr int kThreads = 256;

// One thread per 4 consecutive columns of one row (grid.y walks the rows):
// 16-byte loads of each split's partials (rows of ldp floats, a multiple of
// 4, from a 16-byte aligned workspace) and a 16-byte store when C allows it.
// One thread per element with a 64-bit division for its coordinates ran
// 4.1-4.6 us at M = 128, N = 4096, 4 splits on the H200.
__global__ void splitk_reduce_kernel(const float* __restrict__ partials, int splits, int64_t M,
                                     int64_t N, int64_t ldp, float* __restrict__ C, int64_t ldc,
                                     Epilogue epilogue, bool vector_store) {
  const int64_t n = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * 4;
  ptx::programmatic_launch_start();  // the GEMM's partials (launch_util.h, launch_kernel)
  if (n >= N) return;
  for (int64_t m = blockIdx.y; m < M; m += gridDim.y) {
    const float* p = partials + m * ldp + n;
    // The splits in split order, their loads kBatch at a time ahead of the
    // adds: a load-add chain kept ptxas at two loads in flight, so that 16
    // splits (the row-major GEMV at N = K = 4096) cost 8 L2 round trips
    // after the GEMM's end instead of 2. H200, graph-timed, against the
    // chain in alternate processes (two rounds): x @ W at M = 1, 4096^2
    // 19.5-19.6 -> 19.1-19.2 us; M = 128 F.linear 4096^2 (split-K 4)
    // 25.8 -> 25.3-25.4.
    constexpr int kBatch = 8;
    // Starts at -0: -0 + x == x for every x but NaN (-0 and +0 included), so
    // the sums are those of a loop that starts at split 0; a NaN stays NaN.
    float4 sum = make_float4(-0.f, -0.f, -0.f, -0.f);
    for (int s0 = 0; s0 < splits; s0 += kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (s0 + j < splits) v[j] = *reinterpret_cast<const float4*>(p + (s0 + j) * M * ldp);
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (s0 + j < splits) {
          sum.x += v[j].x;
          sum.y += v[j].y;
          sum.z += v[j].z;
          sum.w += v[j].w;
        }
    }
    const float out[4] = {epilogue_value(epilogue, sum.x, n),
                          n + 1 < N ? epilogue_value(epilogue, sum.y, n + 1) : 0.f,
                          n + 2 < N ? epilogue_value(epilogue, sum.z, n + 2) : 0.f,
                          n + 3 < N ? epilogue_value(epilogue, sum.w, n + 3) : 0.f};
    float* const c = C + m * ldc + n;
    if (vector_store) {
      *reinterpret_cast<float4*>(c) = make_float4(out[0], out[1], out[2], out[3]);
    } else {
      for (int j = 0; j < 4 && n + j < N; ++j) c[j] = out[j];
    }
  }
}

}  // namespace

cudaError_t launch_splitk_reduce(const float* partials, int splits, int64_t M, int64_t N,
                                 int64_t ldp, float* C, int64_t ldc, const Epilogue& epilogue,
                                 cudaStream_t stream) {
  const bool vector_store = reinterpret_cast<uintptr_t>(C) % 16 == 0 && ldc % 4 == 0 && N % 4 == 0;
  const dim3 grid(unsigned(ceil_div(N, 4 * kThreads)),
                  unsigned(M < 65535 ? M : 65535));
  // Its launch overlaps the GEMM's tail; it waits for the partials.
  return launch_kernel<splitk_reduce_kernel>(grid, dim3(kThreads), KernelNeeds{}, stream, partials, splits, M,
                                             N, ldp, C, ldc, epilogue, vector_store);
}

}  // namespace pygpukit
