// The pygpukit::matmul_tf32 operator: its schema, and its CPU implementation,
// which emulates the GPU's TF32 arithmetic so that models and tests run
// anywhere. The CUDA implementation registers in cuda/matmul_tf32_cuda.cpp.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "matmul_args.h"

namespace pygpukit {
namespace {

// Rounds float32 values to TF32 (10 explicit mantissa bits), round to nearest
// with ties to even, on the bit pattern: add 0xFFF plus the lowest kept bit,
// then clear the 13 dropped bits. A carry into the exponent is the correct
// result (rounding up to the next binade, or to Inf past FLT_MAX). Inf and
// NaN are returned unchanged.
at::Tensor round_to_tf32(const at::Tensor& x) {
  const at::Tensor bits = x.contiguous().view(at::kInt);
  const at::Tensor lowest_kept = bits.bitwise_right_shift(13).bitwise_and(1);
  const at::Tensor rounded =
      (bits + 0xFFF + lowest_kept).bitwise_and(static_cast<int32_t>(0xFFFFE000u)).view(at::kFloat);
  return at::where(x.isfinite(), rounded, x);
}

at::Tensor matmul_tf32_cpu(const at::Tensor& a, const at::Tensor& b,
                           std::optional<c10::string_view> precision) {
  check_matmul_args(a, b);
  const Precision p = parse_precision(precision);
  // Accumulating in float64 is "FP32 or better", as the GPU's FP32 tensor
  // core accumulation; the result is rounded once to float32.
  auto operand = [p](const at::Tensor& x) {
    return (p == Precision::kTF32 ? round_to_tf32(x) : x).to(at::kDouble);
  };
  return at::matmul(operand(a), operand(b)).to(at::kFloat).contiguous();
}

std::string matmul_kernel_info_cpu(const at::Tensor& a, const at::Tensor& b,
                                   std::optional<c10::string_view> precision) {
  check_matmul_args(a, b);
  return parse_precision(precision) == Precision::kTF32
             ? "cpu (TF32 inputs rounded to nearest even, float64 accumulation)"
             : "cpu (float32 inputs, float64 accumulation)";
}

}  // namespace

TORCH_LIBRARY(pygpukit, m) {
  // a @ b with torch.matmul's shape rules for float32 tensors; the result is
  // a new contiguous float32 tensor. precision: "tf32" (default), "ieee", or
  // None for the PYGPUKIT_ALLOW_TF32 environment variable.
  m.def("matmul_tf32(Tensor a, Tensor b, *, str? precision=None) -> Tensor");
  // The kernel and tile configuration matmul_tf32 would run for these
  // operands, for tests, benchmarks and curious users.
  m.def("matmul_kernel_info(Tensor a, Tensor b, *, str? precision=None) -> str");
}

TORCH_LIBRARY_IMPL(pygpukit, CPU, m) {
  m.impl("matmul_tf32", &matmul_tf32_cpu);
  m.impl("matmul_kernel_info", &matmul_kernel_info_cpu);
}

}  // namespace pygpukit
