// The epilogue shared by every GEMM kernel: bias and activation applied in
// registers to one accumulator element right before its only store to C.
#pragma once

#include "gemm_problem.h"

namespace pygpukit {

__device__ __forceinline__ float apply_activation(float x, Activation act) {
  switch (act) {
    case Activation::kRelu:  // NaN stays NaN, as in torch.relu (fmaxf would give 0)
      return x < 0.0f ? 0.0f : x;
    case Activation::kGelu:  // x * Phi(x), exact (erf) form, as F.gelu
      return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case Activation::kGeluTanh:  // F.gelu(approximate="tanh")
      return 0.5f * x *
             (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case Activation::kSilu:
      return x / (1.0f + expf(-x));
    case Activation::kNone:
    default:
      return x;
  }
}

// Value stored at C[row, col] for accumulator `acc`. The activation is a
// uniform runtime value (the branch costs nothing next to the mainloop), so
// one kernel instantiation serves plain matmul and every fused linear layer.
__device__ __forceinline__ float epilogue_value(const Epilogue& ep, float acc,
                                                int64_t col) {
  if (ep.bias != nullptr) acc += ep.bias[col];
  return apply_activation(acc, ep.activation);
}

}  // namespace pygpukit
