#include "cuda/hopper/wgmma_gemm.cuh"

namespace pygpukit {
PYGPUKIT_INSTANTIATE_WGMMA(WgmmaSplit3SwapABKMajorNarrow)
}  // namespace pygpukit
