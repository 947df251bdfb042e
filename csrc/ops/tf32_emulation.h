// The CPU emulation of the GPU's GEMM arithmetic, shared by every operator's
// CPU implementation: inputs rounded as the tensor cores see them, products
// accumulated in float64 ("FP32 or better", like the FP32 accumulators).
#pragma once

#include <ATen/core/Tensor.h>

#include "ops/gemm_types.h"

namespace pygpukit {

// The float64 product a @ b of float32 matrices (b may be a transposed view)
// as the GPU computes it under `precision`, before the one rounding to
// float32 that the callers apply:
//   kTF32: inputs rounded to TF32 (round to nearest, ties to even).
//   kIEEE, kFP32: exact inputs (for kFP32 the GPU's result is at least as
//     accurate as FP32's; the CPU's is the float64 product, rounded once).
//   kTF32x3: a_small @ b_big' + a_big' @ b_small + a_big @ b_big, with big =
//     tf32(x), small = tf32(x - big); for a non-finite x the correction
//     terms use 0 (small = 0, big' = 0), so Inf and NaN propagate exactly as
//     in big @ big (what the CUDA packing does too).
at::Tensor emulated_matmul(const at::Tensor& a, const at::Tensor& b, Precision precision);

}  // namespace pygpukit
