// The CPU emulation of the GPU's GEMM arithmetic, shared by every operator's
// CPU implementation: inputs rounded as the tensor cores see them, products
// accumulated in float64 ("FP32 or better", like the FP32 accumulators).
#pragma once

#include <ATen/core/Tensor.h>

#include "gemm_types.h"

namespace pygpukit {

// A float64 copy of the float32 tensor x as a GEMM operand under
// `precision`: rounded to TF32 first (round to nearest, ties to even) for
// kTF32, exact for kIEEE. Matmuls of such operands, rounded once to float32,
// are the CPU implementations' results.
at::Tensor emulated_operand(const at::Tensor& x, Precision precision);

}  // namespace pygpukit
