// mma.sync TF32 kernels for row-major A and column-major B, every configuration
// (and the promoting ones of 3xTF32).
#include "cuda/mma_sync/mma_sync_gemm.cuh"

namespace pygpukit {
PYGPUKIT_INSTANTIATE_MMA_SYNC(Layout::kRowMajor, Layout::kColMajor)
// 3xTF32's staged operands: this layout, 16-byte aligned, only.
template cudaError_t launch_mma_sync_gemm<MmaSyncPromoted, Layout::kRowMajor, Layout::kColMajor,
                                          true>(const GemmProblem&, cudaStream_t);
template cudaError_t launch_mma_sync_gemm<MmaSyncPromotedCompact, Layout::kRowMajor, Layout::kColMajor,
                                          true>(const GemmProblem&, cudaStream_t);
}  // namespace pygpukit
