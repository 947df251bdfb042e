// mma.sync TF32 kernels for column-major A and column-major B, every configuration.
#include "cuda/mma_sync/mma_sync_gemm.cuh"

namespace pygpukit {
PYGPUKIT_INSTANTIATE_MMA_SYNC(Layout::kColMajor, Layout::kColMajor)
}  // namespace pygpukit
