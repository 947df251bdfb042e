// The epilogue shared by every GEMM kernel: bias and activation applied to
// an accumulator before its only store to C. The mma.sync, FMA and skinny
// kernels, the GEMVs and the split-K reduction apply them in registers
// (epilogue_value); the wgmma kernel in a pass over its shared-memory
// staging buffer (with_activation).
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
// activation's code per inlined call (see store_tile in wgmma_epilogue.cuh for
// where that mattered).
__device__ __forceinline__ float epilogue_value(const Epilogue& ep, float acc,
                                                int64_t col) {
  if (ep.bias != nullptr) acc += ep.bias[col];
  return apply_activation(acc, ep.activation);
}

// Whether (row, col), (row, col + 1) pairs of C, col even, can be stored as
// one 8-byte float2.
__device__ __forceinline__ bool pair_stores_aligned(const float* C, int64_t ldc) {
  return ldc % 2 == 0 && reinterpret_cast<uintptr_t>(C) % 8 == 0;
}

// Stores the epilogue of the accumulator pair (acc0, acc1) at C[row, col],
// C[row, col + 1] (col even), skipping whatever lies outside the M x N output.
__device__ __forceinline__ void store_pair(const Epilogue& ep, float* C, int64_t ldc, int64_t M,
                                           int64_t N, int64_t row, int64_t col, float acc0,
                                           float acc1, bool pair_stores) {
  if (row >= M || col >= N) return;
  float* out = C + row * ldc + col;
  const float v0 = epilogue_value(ep, acc0, col);
  if (col + 1 >= N) {
    out[0] = v0;
    return;
  }
  const float v1 = epilogue_value(ep, acc1, col + 1);
  if (pair_stores) {
    *reinterpret_cast<float2*>(out) = make_float2(v0, v1);
  } else {
    out[0] = v0;
    out[1] = v1;
  }
}

}  // namespace pygpukit
