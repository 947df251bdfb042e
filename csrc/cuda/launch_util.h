// Host-side helpers shared by the kernel launchers.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <utility>

#include <cuda_runtime.h>

#include "gemm_problem.h"

namespace pygpukit {

// Calls launch(block) for `p` cut into blocks of at most `rows` rows of A
// and C, in row order (on one stream, so a block may reuse a workspace the
// previous one's kernels have finished with); stops at the first error.
template <class Launch>
cudaError_t launch_row_blocks(const GemmProblem& p, int64_t rows, Launch&& launch) {
  for (int64_t m0 = 0; m0 < p.M; m0 += rows) {
    GemmProblem block = p;
    block.A = p.A + m0 * p.lda;
    block.C = p.C + m0 * p.ldc;
    block.M = p.M - m0 < rows ? p.M - m0 : rows;
    const cudaError_t err = launch(block);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic
// dependent launch when `programmatic` (ptx::grid_dependency_wait: the
// kernel may start before the previous one in the stream ends, and must
// wait for it before touching memory). Compute capability 9.0 and newer.
template <class... Params, class... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool programmatic, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = programmatic ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) cudaGetLastError();  // reported here: not again at torch's next check
  return err;
}

// Sets a kernel's dynamic shared memory limit (needed above 48 KB) once per
// device, keeping the host call off the per-launch path. `done` is the
// caller's own per-kernel flag word: bit d set once device d is configured.
inline cudaError_t allow_dynamic_smem(const void* kernel, int bytes, std::atomic<uint64_t>& done) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit)) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) done.fetch_or(bit, std::memory_order_acq_rel);
  return err;
}

// How many clusters of `cluster` blocks of `kernel` fit on the current device
// at once: the size of a persistent grid. Not simply SMs / cluster, since a
// cluster must fit in one GPC. Cached per device in the caller's `cache`.
inline int resident_clusters(const void* kernel, int threads, int smem_bytes, int cluster,
                             std::array<std::atomic<int>, 64>& cache) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device >= 64) return 1;
  int n = cache[device].load(std::memory_order_relaxed);
  if (n > 0) return n;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(cluster);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem_bytes;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &config) != cudaSuccess || n < 1) {
    cudaGetLastError();  // not sticky: clear it and fall back to the SM count
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    n = sms / cluster > 0 ? sms / cluster : 1;
  }
  cache[device].store(n, std::memory_order_relaxed);
  return n;
}

}  // namespace pygpukit
