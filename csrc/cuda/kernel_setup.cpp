#include "cuda/kernel_setup.h"

#include <mutex>

namespace pygpukit {
namespace {

cudaError_t set_up(const void* kernel, const KernelNeeds& needs, int device, KernelReady* ready) {
  // Above 48 KB a block gets dynamic shared memory only once the kernel's
  // limit is raised.
  if (needs.smem_bytes > 0) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, needs.smem_bytes);
    if (err != cudaSuccess) return err;
  }
#if CUDART_VERSION >= 12030
  cudaFuncAttributes attributes;
  if (cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess)
    ready->programmatic = attributes.ptxVersion >= 90;
  else
    cudaGetLastError();  // not sticky: launched plainly
#endif
  if (needs.cluster > 0) {
    // Not simply SMs / cluster: a cluster must fit in one GPC.
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(needs.cluster);
    config.blockDim = dim3(needs.threads);
    config.dynamicSmemBytes = needs.smem_bytes;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &config) != cudaSuccess || n < 1) {
      cudaGetLastError();  // not sticky: fall back to the SM count
      int sms = 0;
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      n = sms / needs.cluster;
    }
    ready->resident_clusters = n > 0 ? n : 1;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t prepare_kernel(const void* kernel, const KernelNeeds& needs, KernelSetup& setup,
                           KernelReady* ready) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const bool cached = device >= 0 && device < int(setup.device.size());
  const uint64_t bit = cached ? uint64_t{1} << device : 0;
  if (cached && (setup.ready.load(std::memory_order_acquire) & bit)) {
    *ready = setup.device[device];
    return cudaSuccess;
  }
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (cached && (setup.ready.load(std::memory_order_acquire) & bit)) {  // set up while we waited
    *ready = setup.device[device];
    return cudaSuccess;
  }
  KernelReady learnt;
  err = set_up(kernel, needs, device, &learnt);
  if (err != cudaSuccess) return err;
  if (cached) {
    setup.device[device] = learnt;
    setup.ready.fetch_or(bit, std::memory_order_release);
  }
  *ready = learnt;
  return cudaSuccess;
}

}  // namespace pygpukit
