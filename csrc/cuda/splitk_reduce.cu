#include "splitk_reduce.h"

#include "epilogue.cuh"

namespace pygpukit {
namespace {

constexpr int kThreads = 256;

// One thread per output element, grid-stride; consecutive threads take
// consecutive columns, so every split's reads and the store are coalesced.
__global__ void splitk_reduce_kernel(const float* __restrict__ partials, int splits, int64_t M,
                                     int64_t N, int64_t ldp, float* __restrict__ C, int64_t ldc,
                                     Epilogue epilogue) {
  const int64_t total = M * N;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * kThreads) {
    const int64_t m = i / N, n = i % N;
    const float* p = partials + m * ldp + n;
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum += p[s * M * ldp];
    C[m * ldc + n] = epilogue_value(epilogue, sum, n);
  }
}

}  // namespace

cudaError_t launch_splitk_reduce(const float* partials, int splits, int64_t M, int64_t N,
                                 int64_t ldp, float* C, int64_t ldc, const Epilogue& epilogue,
                                 cudaStream_t stream) {
  const int64_t blocks = (M * N + kThreads - 1) / kThreads;
  splitk_reduce_kernel<<<unsigned(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(
      partials, splits, M, N, ldp, C, ldc, epilogue);
  return cudaGetLastError();
}

}  // namespace pygpukit
