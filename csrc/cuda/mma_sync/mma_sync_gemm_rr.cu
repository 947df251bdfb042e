// mma.sync TF32 kernels for row-major A and row-major B, every configuration.
#include "cuda/mma_sync/mma_sync_gemm.cuh"

namespace pygpukit {
PYGPUKIT_INSTANTIATE_MMA_SYNC(Layout::kRowMajor, Layout::kRowMajor)
}  // namespace pygpukit
