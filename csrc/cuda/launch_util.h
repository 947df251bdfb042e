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

// Whether `kernel` may be launched programmatically on the current device:
// the code that runs there was compiled from PTX for sm_90 or newer, so it
// holds the griddepcontrol.wait of ptx::programmatic_launch_start. Code for
// older targets lacks it (an sm_8x binary, or compute_80 PTX compiled at
// load time on a newer GPU) and is launched plainly. Before CUDA 12.3 stream
// capture had no programmatic edges, so such builds launch everything
// plainly. `cache` is the kernel's own word: bit 2d set once device d is
// checked, bit 2d + 1 if the kernel may be launched programmatically there.
inline bool programmatic_launch_ok(const void* kernel, std::atomic<uint64_t>& cache) {
#if CUDART_VERSION >= 12030
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device >= 32) {
    cudaGetLastError();  // the launch itself reports a bad device
    return false;
  }
  const uint64_t checked = uint64_t{1} << (2 * device), allowed = checked << 1;
  const uint64_t bits = cache.load(std::memory_order_acquire);
  if (bits & checked) return (bits & allowed) != 0;
  cudaFuncAttributes attributes;
  const bool ok = cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess &&
                  attributes.ptxVersion >= 90;
  if (!ok) cudaGetLastError();
  cache.fetch_or(checked | (ok ? allowed : 0), std::memory_order_acq_rel);
  return ok;
#else
  (void)kernel;
  (void)cache;
  return false;
#endif
}

// kKernel<<<grid, block, smem, stream>>>(args...), as a programmatic
// dependent launch where programmatic_launch_ok allows: the kernel may then
// start while the previous one in the stream still runs, so it must call
// ptx::programmatic_launch_start before it touches global memory (every
// kernel launched through here does), which also lets the next one start
// early in turn. The launch overlaps the previous kernel's tail instead of
// following its end.
template <auto kKernel, class... Args>
cudaError_t launch_kernel(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          Args&&... args) {
  static std::atomic<uint64_t> pdl_cache{0};  // one per kernel
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs =
      programmatic_launch_ok(reinterpret_cast<const void*>(kKernel), pdl_cache) ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&config, kKernel, std::forward<Args>(args)...);
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
