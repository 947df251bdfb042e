// The CUDA implementation of pygpukit::linear_tf32: x flattened to [M, K]
// as the A operand, nn.Linear's weight[N, K] read in place as the
// column-major (K-major) B operand with ldb = weight.stride(0), and bias and
// activation handed to the kernels' epilogue, so the output is written once.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "ops/activation.h"
#include "ops/linear_args.h"
#include "ops/matmul_args.h"
#include "cuda/gemm_adapter.h"

namespace pygpukit {
namespace {

at::Tensor linear_tf32_cuda(const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, c10::string_view activation,
                            std::optional<c10::string_view> precision) {
  const LinearShapes s = check_linear_args(x, weight, bias);
  const Activation act = parse_activation(activation, "linear_tf32");
  const Precision prec = parse_precision(precision, "linear_tf32");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(s.out, x.options());
  if (out.numel() == 0) return out;
  if (s.K == 0) {
    // No product (run_gemm needs K >= 1): the epilogue of a zero accumulator.
    if (bias.has_value()) {
      out.copy_(*bias);
    } else {
      out.zero_();
    }
    return apply_activation(out, act);
  }
  // reshape is a view when the leading dimensions merge (always for
  // contiguous x and for row-major views such as x[..., :K]); only other
  // strides are copied. A 2-D x is already [M, K]: no view to make.
  // describe() then reads it row- or column-major. x2 is a named local: a
  // copy must outlive the launch that reads its pointer.
  const at::Tensor x2 = x.dim() == 2 ? x : x.reshape({s.M, s.K});
  const Operand A = describe(x2);
  const Operand B = describe(weight.t());
  // The epilogue reads bias[col]: it must be dense (a strided view is copied;
  // it is only N floats).
  const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();

  GemmProblem p;
  p.M = s.M;
  p.N = s.N;
  p.K = s.K;
  set_operands(p, A, B);
  p.C = out.mutable_data_ptr<float>();
  p.ldc = s.N;
  p.epilogue.bias = b.defined() ? b.const_data_ptr<float>() : nullptr;
  p.epilogue.activation = act;
  run_gemm_checked(p, prec, "linear_tf32");
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pygpukit, CUDA, m) { m.impl("linear_tf32", &linear_tf32_cuda); }

}  // namespace pygpukit
