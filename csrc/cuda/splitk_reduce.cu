#include "splitk_reduce.h"

#include "epilogue.cuh"
#include "int_math.h"
#include "launch_util.h"
#include "ptx.cuh"

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
    float4 sum = *reinterpret_cast<const float4*>(p);
    for (int s = 1; s < splits; ++s) {
      const float4 v = *reinterpret_cast<const float4*>(p + s * M * ldp);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
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
  return launch_kernel<splitk_reduce_kernel>(grid, dim3(kThreads), 0, stream, partials, splits, M,
                                             N, ldp, C, ldc, epilogue, vector_store);
}

}  // namespace pygpukit
