// The pygpukit::matmul_tf32 operator: its schema, and its CPU implementation,
// which emulates the GPU's TF32 arithmetic so that models and tests run
// anywhere. The CUDA implementation registers in cuda/matmul_tf32_cuda.cpp.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "ops/matmul_args.h"
#include "ops/tf32_emulation.h"

namespace pygpukit {
namespace {

at::Tensor matmul_tf32_cpu(const at::Tensor& a, const at::Tensor& b,
                           std::optional<c10::string_view> precision) {
  check_matmul_args(a, b);
  const Precision p = parse_precision(precision, "matmul_tf32");
  return emulated_matmul(a, b, p).to(at::kFloat).contiguous();
}

std::string matmul_kernel_info_cpu(const at::Tensor& a, const at::Tensor& b,
                                   std::optional<c10::string_view> precision) {
  check_matmul_args(a, b);
  switch (parse_precision(precision, "matmul_tf32")) {
    case Precision::kTF32:
      return "cpu (TF32 inputs rounded to nearest even, float64 accumulation)";
    case Precision::kTF32x3:
      return "cpu (3xTF32: big/small TF32 split of each input, float64 accumulation)";
    case Precision::kFP32:
      return "cpu (FP32-accurate: float32 inputs, float64 accumulation)";
    default:
      return "cpu (float32 inputs, float64 accumulation)";
  }
}

// Meta and fake tensors (torch.compile, torch.export, FakeTensorMode): the
// result's shape with the same checks as the CPU and CUDA kernels, so that a
// bad call fails while tracing exactly as it fails in eager mode.
at::Tensor matmul_tf32_meta(const at::Tensor& a, const at::Tensor& b,
                            std::optional<c10::string_view> precision) {
  const c10::SymDimVector out = matmul_result_shape(a, b);
  parse_precision(precision, "matmul_tf32");
  return at::empty_symint(out, a.options());  // contiguous, like the CPU and CUDA results
}

// Meta (and fake) tensors have no data, hence no GPU or alignment to choose a
// kernel by; the arguments are still checked, so that a bad call fails as it
// would on real tensors.
std::string matmul_kernel_info_meta(const at::Tensor& a, const at::Tensor& b,
                                    std::optional<c10::string_view> precision) {
  matmul_result_shape(a, b);
  parse_precision(precision, "matmul_tf32");
  return "none (meta or fake tensors: a kernel is chosen only for real CPU or CUDA tensors)";
}

}  // namespace

TORCH_LIBRARY(pygpukit, m) {
  // a @ b with torch.matmul's shape rules for float32 tensors; the result is
  // a new contiguous float32 tensor. precision: "tf32" (default), "tf32x3", "fp32", "ieee",
  // or None for the PYGPUKIT_PRECISION / PYGPUKIT_ALLOW_TF32 environment
  // variables.
  m.def("matmul_tf32(Tensor a, Tensor b, *, str? precision=None) -> Tensor");
  // The kernel and tile configuration matmul_tf32 would run for these
  // operands, for tests, benchmarks and curious users.
  m.def("matmul_kernel_info(Tensor a, Tensor b, *, str? precision=None) -> str");
}

TORCH_LIBRARY_IMPL(pygpukit, CPU, m) {
  m.impl("matmul_tf32", &matmul_tf32_cpu);
  m.impl("matmul_kernel_info", &matmul_kernel_info_cpu);
}

TORCH_LIBRARY_IMPL(pygpukit, Meta, m) {
  m.impl("matmul_tf32", &matmul_tf32_meta);
  m.impl("matmul_kernel_info", &matmul_kernel_info_meta);
}

}  // namespace pygpukit
