// A kernel's first use on a device (its dynamic shared memory limit raised,
// whether it may be launched programmatically, how many of its clusters are
// resident at once), made safe for threads that reach it together.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include <cuda_runtime.h>

namespace pygpukit {

// What a kernel's launcher asks of it; the same for every launch of one
// kernel. cluster > 0 asks for the residency query (a persistent grid).
struct KernelNeeds {
  int smem_bytes = 0;  // dynamic shared memory per block
  int threads = 0;     // per block, for the residency query
  int cluster = 0;     // blocks per cluster, for the residency query
};

// What the launcher learns, per device.
struct KernelReady {
  // The code that runs there was compiled from PTX for sm_90 or newer, so
  // it holds the griddepcontrol.wait of ptx::programmatic_launch_start and
  // may start before the previous kernel in the stream ends. Code for older
  // targets (an sm_8x binary, compute_80 PTX compiled at load time on a
  // newer GPU) lacks it and is launched plainly; so is everything before
  // CUDA 12.3, whose stream capture had no programmatic edges.
  bool programmatic = false;
  int resident_clusters = 0;  // clusters resident at once (needs.cluster > 0), at least 1
};

// One kernel's state: the devices it is set up on, and what was learnt there.
struct KernelSetup {
  std::atomic<uint64_t> ready{0};  // bit d: device d set up, its entry below written
  std::array<KernelReady, 64> device{};
};

// Sets `kernel` up on the current device once and returns what was learnt.
// The set-up runs under one process-wide mutex and is published only once
// complete, so no thread launches a kernel while another still sets its
// attributes or queries its occupancy, and every thread sees the same
// residency (the launch's grid and the workspace sized before it depend on
// it). A failed set-up is retried on the next call.
cudaError_t prepare_kernel(const void* kernel, const KernelNeeds& needs, KernelSetup& setup,
                           KernelReady* ready);

// The state of kKernel: one per kernel in the whole library.
template <auto kKernel>
KernelSetup& kernel_setup() {
  static KernelSetup setup;
  return setup;
}

template <auto kKernel>
cudaError_t prepare_kernel(const KernelNeeds& needs, KernelReady* ready) {
  return prepare_kernel(reinterpret_cast<const void*>(kKernel), needs, kernel_setup<kKernel>(), ready);
}

}  // namespace pygpukit
