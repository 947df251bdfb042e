// Autocast for the pygpukit operators: inside torch.autocast they run in
// float32, as ATen's float32-policy ops do (half and bfloat16 inputs cast up,
// a float32 result). Without these kernels the dispatcher falls through
// Autocast, and a bfloat16 activation produced by an autocast region (say,
// by a layer that swap_linear_ skipped) reached the float32-only kernels and
// raised. The casts are ordinary differentiable ops: gradients flow back to
// the inputs in their own dtype.
#include <ATen/ATen.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <string>

#include "ops/op_handles.h"

namespace pygpukit {
namespace {

// t cast to float32 if autocast would have lowered it (float16, bfloat16);
// any other dtype, and a None (undefined) tensor, is left for the
// operator's own checks.
at::Tensor float32_if_lowered(const at::Tensor& t) {
  const bool lowered = t.defined() && (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16);
  return lowered ? t.to(at::kFloat) : t;
}

at::Tensor matmul_tf32_autocast(const at::Tensor& a, const at::Tensor& b, PrecisionArg precision) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return matmul_tf32_op().call(float32_if_lowered(a), float32_if_lowered(b), precision);
}

at::Tensor linear_tf32_autocast(const at::Tensor& x, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias, c10::string_view activation,
                                PrecisionArg precision) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const std::optional<at::Tensor> bias32 =
      bias ? std::optional<at::Tensor>(float32_if_lowered(*bias)) : std::nullopt;
  return linear_tf32_op().call(float32_if_lowered(x), float32_if_lowered(weight), bias32,
                               activation, precision);
}

// What matmul_tf32 would run for the same call inside the region.
std::string matmul_kernel_info_autocast(const at::Tensor& a, const at::Tensor& b, PrecisionArg precision) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return matmul_kernel_info_op().call(float32_if_lowered(a), float32_if_lowered(b), precision);
}

// The same kernels serve every autocast device.
void register_autocast_kernels(torch::Library& m) {
  m.impl("matmul_tf32", &matmul_tf32_autocast);
  m.impl("linear_tf32", &linear_tf32_autocast);
  m.impl("matmul_kernel_info", &matmul_kernel_info_autocast);
}

}  // namespace

TORCH_LIBRARY_IMPL(pygpukit, AutocastCPU, m) { register_autocast_kernels(m); }
TORCH_LIBRARY_IMPL(pygpukit, AutocastCUDA, m) { register_autocast_kernels(m); }

}  // namespace pygpukit
