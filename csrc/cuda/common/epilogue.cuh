// The epilogue shared by every GEMM kernel: bias and activation applied to
// an accumulator before its only store to C. The FMA and skinny kernels, the
// GEMVs and the split-K reduction apply them per value (epilogue_value); the
// mma.sync and wgmma kernels in a loop over their shared-memory staging
// buffers, with the activation hoisted out of the loop (with_activation).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/gemm_problem.h"

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
    case Activation::kSilu:  // x * sigmoid(x). The fast exp and reciprocal (a few
      // ulp) instead of expf and an IEEE division, far below TF32's 2^-11
      // rounding: SiLU took 909 us against GELU's 735 us in the fused wgmma
      // kernel at M = 8192, 4096 -> 4096 (H200). Overflow gives x * 0 = -0
      // for x << 0, NaN stays NaN.
      return x * __frcp_rn(1.0f + __expf(-x));
    case Activation::kNone:
    default:
      return x;
  }
}

// Calls f(std::integral_constant<Activation, a>{}) for the runtime
// activation a: a loop inside f is then compiled once per activation with
// the branch hoisted out of it, rather than a branch per element.
template <class F>
__device__ __forceinline__ void with_activation(Activation act, F&& f) {
  switch (act) {
    case Activation::kRelu:
      return f(std::integral_constant<Activation, Activation::kRelu>{});
    case Activation::kGelu:
      return f(std::integral_constant<Activation, Activation::kGelu>{});
    case Activation::kGeluTanh:
      return f(std::integral_constant<Activation, Activation::kGeluTanh>{});
    case Activation::kSilu:
      return f(std::integral_constant<Activation, Activation::kSilu>{});
    case Activation::kNone:
    default:
      return f(std::integral_constant<Activation, Activation::kNone>{});
  }
}

// Value stored at C[row, col] for accumulator `acc`. The activation is a
// uniform runtime value, so one kernel instantiation serves plain matmul and
// every fused linear layer; the price is a branch and a copy of each
// activation's code per inlined call (store_tile in wgmma_epilogue.cuh and
// store_warp_tile in mma_sync_gemm.cuh say where that mattered).
__device__ __forceinline__ float epilogue_value(const Epilogue& ep, float acc,
                                                int64_t col) {
  if (ep.bias != nullptr) acc += ep.bias[col];
  return apply_activation(acc, ep.activation);
}

}  // namespace pygpukit
