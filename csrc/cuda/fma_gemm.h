// The plain FP32 GEMM (FMA on CUDA cores, no tensor cores), used when TF32 is
// not allowed (precision "ieee") and on GPUs older than sm_80.
#pragma once

#include "gemm_problem.h"

namespace pygpukit {

// Any layout, alignment and size (M, N, K >= 1). Each product is one IEEE
// FP32 fused multiply-add, accumulated over K in order.
cudaError_t launch_fma_gemm(const GemmProblem& problem, cudaStream_t stream);

}  // namespace pygpukit
