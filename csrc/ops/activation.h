// The activations a fused linear layer applies in its epilogue: their names
// in the operator schema, and their meaning in ATen terms (the reference the
// CPU implementation computes, and that the CUDA epilogue in
// cuda/epilogue.cuh must match).
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include "ops/gemm_types.h"

namespace pygpukit {

// The activation named `name`: "none", "relu", "gelu" (erf form, F.gelu's
// default), "gelu_tanh" (F.gelu(approximate="tanh")) or "silu"; nullopt for
// any other name.
std::optional<Activation> activation_named(c10::string_view name);

// activation_named(name), throwing ValueError naming `op` and listing the
// valid names where it gives nullopt.
Activation parse_activation(c10::string_view name, const char* op);

// act(y) with ATen's own functions (at::relu, at::gelu, at::silu), for any
// floating dtype and device; y itself for kNone.
at::Tensor apply_activation(const at::Tensor& y, Activation act);

}  // namespace pygpukit
