// The pygpukit::linear_tf32 operator, y = act(x @ weight.T + bias) as
// nn.Linear stores its parameters: its schema, and its CPU implementation
// (the same TF32 emulation as matmul_tf32). The CUDA implementation, which
// applies bias and activation in the GEMM's epilogue, registers in
// cuda/linear_tf32_cuda.cpp.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "ops/activation.h"
#include "ops/linear_args.h"
#include "ops/matmul_args.h"
#include "ops/tf32_emulation.h"

namespace pygpukit {
namespace {

at::Tensor linear_tf32_cpu(const at::Tensor& x, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias, c10::string_view activation,
                           std::optional<c10::string_view> precision) {
  check_linear_args(x, weight, bias);
  const Activation act = parse_activation(activation, "linear_tf32");
  const Precision p = parse_precision(precision, "linear_tf32");
  // Rounded to float32 where the GPU's FP32 epilogue holds a value: the
  // product before the bias is added (a product beyond float32's range is
  // +-inf there, and a bias cannot bring it back; added in float64 to the
  // unrounded product, -FLT_MAX brought 2 FLT_MAX back to a finite value),
  // and the biased sum before the activation (a pre-activation beyond
  // float32's range is +-inf, which GELU and SiLU turn into NaN as torch's
  // do; applied in float64, they made -6e38 a finite -0.0). The sum of two
  // float32 values in float64, rounded once, is the FP32 add's result. The
  // activation in float64, then one more rounding: at least as accurate as
  // the GPU's FP32 epilogue.
  auto held_in_fp32 = [](const at::Tensor& t) { return t.to(at::kFloat).to(at::kDouble); };
  at::Tensor y = emulated_matmul(x, weight.t(), p);
  if (bias.has_value()) y = held_in_fp32(y) + bias->to(at::kDouble);
  if (act != Activation::kNone) y = held_in_fp32(y);
  return apply_activation(y, act).to(at::kFloat).contiguous();
}

// Meta and fake tensors: the result's shape with the CPU and CUDA kernels'
// checks, in their order (see matmul_tf32_meta).
at::Tensor linear_tf32_meta(const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, c10::string_view activation,
                            std::optional<c10::string_view> precision) {
  const c10::SymDimVector out = linear_result_shape(x, weight, bias);
  parse_activation(activation, "linear_tf32");
  parse_precision(precision, "linear_tf32");
  return at::empty_symint(out, x.options());
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(pygpukit, m) {
  // act(x @ weight.T + bias) for float32 x[..., in_features],
  // weight[out_features, in_features] (nn.Linear's layout) and bias[out_features]
  // or None; activation: "none", "relu", "gelu" (erf), "gelu_tanh", "silu".
  // The result is a new contiguous float32 tensor [..., out_features].
  // precision as in matmul_tf32.
  m.def(
      "linear_tf32(Tensor x, Tensor weight, Tensor? bias=None, str activation=\"none\", *, "
      "str? precision=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(pygpukit, CPU, m) { m.impl("linear_tf32", &linear_tf32_cpu); }

TORCH_LIBRARY_IMPL(pygpukit, Meta, m) { m.impl("linear_tf32", &linear_tf32_meta); }

}  // namespace pygpukit
