// Typed dispatcher handles of the pygpukit operators, for the kernels that
// re-enter the dispatcher below their own key (autograd.cpp, autocast.cpp).
#pragma once

#include <optional>
#include <string>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

namespace pygpukit {

using PrecisionArg = std::optional<c10::string_view>;

// The operators' schemas as C++ signatures (those of every backend's kernel).
using MatmulSignature = at::Tensor(const at::Tensor&, const at::Tensor&, PrecisionArg);
using LinearSignature = at::Tensor(const at::Tensor&, const at::Tensor&,
                                   const std::optional<at::Tensor>&, c10::string_view,
                                   PrecisionArg);

template <class Signature>
c10::TypedOperatorHandle<Signature> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

// Looked up on first use, when the library's registrations are all done.
inline const c10::TypedOperatorHandle<MatmulSignature>& matmul_tf32_op() {
  static const auto op = find_op<MatmulSignature>("pygpukit::matmul_tf32");
  return op;
}

inline const c10::TypedOperatorHandle<LinearSignature>& linear_tf32_op() {
  static const auto op = find_op<LinearSignature>("pygpukit::linear_tf32");
  return op;
}

using KernelInfoSignature = std::string(const at::Tensor&, const at::Tensor&, PrecisionArg);

inline const c10::TypedOperatorHandle<KernelInfoSignature>& matmul_kernel_info_op() {
  static const auto op = find_op<KernelInfoSignature>("pygpukit::matmul_kernel_info");
  return op;
}

}  // namespace pygpukit
