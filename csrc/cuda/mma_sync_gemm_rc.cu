// mma.sync TF32 kernels for row-major A and column-major B, every configuration.
#include "mma_sync_gemm.cuh"

namespace pygpukit {
PYGPUKIT_INSTANTIATE_MMA_SYNC(Layout::kRowMajor, Layout::kColMajor)
}  // namespace pygpukit
