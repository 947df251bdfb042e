// Host-side helpers shared by the kernel launchers.
#pragma once

#include <atomic>
#include <cstdint>

#include <cuda_runtime.h>

namespace pygpukit {

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

}  // namespace pygpukit
