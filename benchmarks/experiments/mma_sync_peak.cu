// The issue ceiling of mma.sync.m16n8k8 TF32 on the current GPU: warps that
// run only independent MMA chains on registers (no memory traffic), for
// several warp counts per SM. This bounds what the mma.sync GEMM path can
// reach (docs/performance.md, "Measured limits").
//
//   nvcc -O3 -arch=sm_90a -o mma_sync_peak benchmarks/experiments/mma_sync_peak.cu && ./mma_sync_peak
//   (-arch=sm_80 / sm_86 / sm_89 for Ampere and Ada)
//
// Prints TFLOP/s = 2 * 16 * 8 * 8 FLOP per MMA over the CUDA-event time of
// one launch, after a warm-up launch.
#include <cstdint>
#include <cstdio>

#include <cuda_runtime.h>

// kChains independent accumulators per warp, so consecutive MMAs never wait
// on each other; the operands are fixed registers.
template <int kChains>
__global__ void mma_chains(float* sink, int iterations) {
  float acc[kChains][4] = {};
  uint32_t a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = __float_as_uint(1.0f + threadIdx.x * 1e-3f + i);
  for (int i = 0; i < 2; ++i) b[i] = __float_as_uint(0.5f + threadIdx.x * 1e-3f + i);
  for (int it = 0; it < iterations; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c)
      asm volatile(
          "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  float sum = 0.0f;
  for (int c = 0; c < kChains; ++c) sum += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  if (sum == 12345.0f) sink[0] = sum;  // keeps the MMAs live
}

template <int kChains>
void measure(int sms, int warps_per_block, int blocks_per_sm, float* sink) {
  constexpr int kIterations = 20000;
  const dim3 grid(sms * blocks_per_sm), block(32 * warps_per_block);
  mma_chains<kChains><<<grid, block>>>(sink, 100);  // warm-up
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  mma_chains<kChains><<<grid, block>>>(sink, kIterations);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  const double flop = 2.0 * 16 * 8 * 8 * kChains * double(kIterations) * grid.x * warps_per_block;
  std::printf("mma.sync TF32 m16n8k8: %2d chains per warp, %2d warps per SM: %6.1f TFLOP/s\n",
              kChains, warps_per_block * blocks_per_sm, flop / ms / 1e9);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

int main() {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
    std::fprintf(stderr, "mma_sync_peak: no CUDA device\n");
    return 1;
  }
  float* sink = nullptr;
  cudaMalloc(&sink, sizeof(float));
  measure<8>(sms, 4, 1, sink);
  measure<8>(sms, 8, 1, sink);
  measure<8>(sms, 8, 2, sink);
  measure<16>(sms, 8, 2, sink);
  measure<8>(sms, 16, 2, sink);
  cudaFree(sink);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "mma_sync_peak: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}
