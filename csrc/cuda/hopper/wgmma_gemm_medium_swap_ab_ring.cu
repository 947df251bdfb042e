#include "cuda/hopper/wgmma_gemm.cuh"

namespace pygpukit {
PYGPUKIT_INSTANTIATE_WGMMA(WgmmaMediumSwapABRing)
}  // namespace pygpukit
