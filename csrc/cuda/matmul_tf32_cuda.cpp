// The CUDA implementation of pygpukit::matmul_tf32: the thin adapter that
// turns torch.matmul's operands into a (batched) GemmProblem and runs it on
// the tensors' device and current stream.
#include <numeric>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include "ops/matmul_args.h"
#include "ops/settings.h"
#include "cuda/gemm_adapter.h"

namespace pygpukit {
namespace {

// x[..., R, C] broadcast to [*batch, R, C]. x itself when its batch
// dimensions already are `batch` (every 2-D operand, every unbroadcast
// batch): expand would only make an identical view, a dispatcher call and a
// tensor allocation per operand and call.
at::Tensor expand_matrix(const at::Tensor& x, c10::IntArrayRef batch, int64_t R, int64_t C) {
  if (x.sizes().slice(0, x.dim() - 2) == batch) return x;
  at::DimVector sizes(batch.begin(), batch.end());
  sizes.push_back(R);
  sizes.push_back(C);
  return x.expand(sizes);
}

GemmProblem make_problem(const at::Tensor& a, const at::Tensor& b, const MatmulShapes& s,
                         at::Tensor& out, Operand& A, Operand& B) {
  const at::Tensor am = a.dim() == 1 ? a.unsqueeze(0) : a;   // [..., M, K]
  const at::Tensor bm = b.dim() == 1 ? b.unsqueeze(-1) : b;  // [..., K, N]
  A = describe(expand_matrix(am, s.batch, s.M, s.K));
  B = describe(expand_matrix(bm, s.batch, s.K, s.N));

  GemmProblem p;
  p.M = s.M;
  p.N = s.N;
  p.K = s.K;
  p.batch = std::accumulate(s.batch.begin(), s.batch.end(), int64_t{1}, std::multiplies<>());
  set_operands(p, A, B);
  p.C = out.mutable_data_ptr<float>();
  p.ldc = s.N;
  p.batch_stride_c = s.M * s.N;
  // A batch of row-major A over one shared B whose rows follow each other in
  // memory is a single GEMM with batch * M rows: bigger tiles, one wave plan.
  // So is a batch of single rows (x[B, 1, K] @ W, a decode step's tokens),
  // whose rows lie batch_stride_a apart: describe() gives a single row no
  // row stride (lda 0), so they ran as B one-row GEMMs, each reading B.
  const int64_t row_stride = p.M == 1 ? p.batch_stride_a : p.lda;
  if (p.batch > 1 && p.batch_stride_b == 0 && p.layout_a == Layout::kRowMajor &&
      p.batch_stride_a == p.M * row_stride) {
    p.lda = row_stride;
    p.M *= p.batch;
    p.batch = 1;
  }
  return p;
}

at::Tensor matmul_tf32_cuda(const at::Tensor& a, const at::Tensor& b,
                            std::optional<c10::string_view> precision) {
  const MatmulShapes s = check_matmul_args(a, b);
  const Precision prec = parse_precision(precision, "matmul_tf32");
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor out = at::empty(s.out, a.options());
  if (out.numel() == 0) return out;
  if (s.K == 0) return out.zero_();
  Operand A, B;
  const GemmProblem p = make_problem(a, b, s, out, A, B);
  run_gemm_checked(p, prec, "matmul_tf32");
  return out;
}

std::string matmul_kernel_info_cuda(const at::Tensor& a, const at::Tensor& b,
                                    std::optional<c10::string_view> precision) {
  const MatmulShapes s = check_matmul_args(a, b);
  const Precision prec = parse_precision(precision, "matmul_tf32");
  const c10::cuda::CUDAGuard guard(a.device());
  // What matmul_tf32_cuda launches nothing for: an empty result (an empty
  // batch too) or K = 0. (M * N * K could overflow with expanded operands.)
  if (c10::multiply_integers(s.out) == 0 || s.K == 0) return "none (empty product: no kernel runs)";
  // A placeholder output: only its address's alignment would matter, and the
  // caching allocator always returns 16-byte aligned blocks.
  at::Tensor out = at::empty({0}, a.options());
  Operand A, B;
  GemmProblem p = make_problem(a, b, s, out, A, B);
  p.forced = forced_kernel("matmul_tf32");
  return describe_gemm(p, prec);
}

}  // namespace

TORCH_LIBRARY_IMPL(pygpukit, CUDA, m) {
  m.impl("matmul_tf32", &matmul_tf32_cuda);
  m.impl("matmul_kernel_info", &matmul_kernel_info_cuda);
}

}  // namespace pygpukit
