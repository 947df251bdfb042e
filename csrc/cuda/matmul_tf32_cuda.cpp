// The CUDA implementation of pygpukit::matmul_tf32: the one thin adapter that
// turns tensors into a GemmProblem (pointers, sizes, leading dimensions,
// layouts) and runs it on the tensors' device and current stream.
#include <numeric>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../matmul_args.h"
#include "gemm_problem.h"

namespace pygpukit {
namespace {

// One operand as the kernel sees it. `storage` keeps alive a copy we had to
// make (when neither row- nor column-major), for as long as the launch needs
// the pointer; the stream-ordered caching allocator makes that safe.
struct Operand {
  const float* ptr = nullptr;
  int64_t ld = 0;
  Layout layout = Layout::kRowMajor;
  int64_t batch_stride = 0;
  at::Tensor storage;
};

// The batch dimensions of x[*batch, R, C] flattened into one stride, if the
// strides allow it (stride-0 broadcast dimensions do), else nullopt.
std::optional<int64_t> flat_batch_stride(const at::Tensor& x) {
  int64_t stride = 0, next = 0;
  bool first = true;
  for (int64_t d = x.dim() - 3; d >= 0; --d) {
    if (x.size(d) == 1) continue;
    if (first) {
      stride = x.stride(d);
      first = false;
    } else if (x.stride(d) != next) {
      return std::nullopt;
    }
    next = x.stride(d) * x.size(d);
  }
  return stride;
}

// Describes x[*batch, R, C] without copying when it is row-major (unit
// column stride) or column-major (unit row stride), as cuBLAS callers do
// (ATen's prepare_matrix_for_cublas). A dimension of size 1 has no meaningful
// stride, so it never forces a copy; a stride-0 (expanded) leading dimension
// is fine too, since the kernel only reads. Anything else is copied once.
Operand describe(const at::Tensor& x) {
  const int64_t R = x.size(-2), C = x.size(-1);
  const int64_t s0 = x.stride(-2), s1 = x.stride(-1);
  if (const auto bs = flat_batch_stride(x)) {
    if (s1 == 1 || C == 1) return {x.const_data_ptr<float>(), R == 1 ? 0 : s0, Layout::kRowMajor, *bs, {}};
    if (s0 == 1 || R == 1) return {x.const_data_ptr<float>(), C == 1 ? 0 : s1, Layout::kColMajor, *bs, {}};
  }
  at::Tensor copy = x.contiguous();
  return {copy.const_data_ptr<float>(), C, Layout::kRowMajor, R * C, copy};
}

at::Tensor expand_matrix(const at::Tensor& x, const std::vector<int64_t>& batch, int64_t R,
                         int64_t C) {
  std::vector<int64_t> sizes = batch;
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
  p.A = A.ptr;
  p.lda = A.ld;
  p.layout_a = A.layout;
  p.batch_stride_a = A.batch_stride;
  p.B = B.ptr;
  p.ldb = B.ld;
  p.layout_b = B.layout;
  p.batch_stride_b = B.batch_stride;
  p.C = out.mutable_data_ptr<float>();
  p.ldc = s.N;
  p.batch_stride_c = s.M * s.N;
  // A batch of row-major A over one shared B whose rows follow each other in
  // memory is a single GEMM with batch * M rows: bigger tiles, one wave plan.
  if (p.batch > 1 && p.batch_stride_b == 0 && p.layout_a == Layout::kRowMajor &&
      p.batch_stride_a == p.M * p.lda) {
    p.M *= p.batch;
    p.batch = 1;
  }
  return p;
}

at::Tensor matmul_tf32_cuda(const at::Tensor& a, const at::Tensor& b,
                            std::optional<c10::string_view> precision) {
  const MatmulShapes s = check_matmul_args(a, b);
  const Precision prec = parse_precision(precision);
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor out = at::empty(s.out, a.options());
  if (out.numel() == 0) return out;
  if (s.K == 0) return out.zero_();
  Operand A, B;
  const GemmProblem p = make_problem(a, b, s, out, A, B);
  // Scratch for the Hopper path's operand staging, from torch's caching
  // allocator on this stream (freed back to it once the stream is done).
  const size_t workspace_bytes = gemm_workspace_bytes(p, prec);
  at::Tensor workspace;
  if (workspace_bytes > 0)
    workspace = at::empty({static_cast<int64_t>(workspace_bytes)}, a.options().dtype(at::kByte));
  const cudaError_t err = run_gemm(p, prec, workspace_bytes > 0 ? workspace.data_ptr() : nullptr,
                                   at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "matmul_tf32: kernel launch failed (", describe_gemm(p, prec),
              "): ", cudaGetErrorString(err));
  return out;
}

std::string matmul_kernel_info_cuda(const at::Tensor& a, const at::Tensor& b,
                                    std::optional<c10::string_view> precision) {
  const MatmulShapes s = check_matmul_args(a, b);
  const Precision prec = parse_precision(precision);
  const c10::cuda::CUDAGuard guard(a.device());
  if (s.M * s.N * s.K == 0) return "none (empty product: no kernel runs)";
  // A placeholder output: only its address's alignment would matter, and the
  // caching allocator always returns 16-byte aligned blocks.
  at::Tensor out = at::empty({0}, a.options());
  Operand A, B;
  return describe_gemm(make_problem(a, b, s, out, A, B), prec);
}

}  // namespace

TORCH_LIBRARY_IMPL(pygpukit, CUDA, m) {
  m.impl("matmul_tf32", &matmul_tf32_cuda);
  m.impl("matmul_kernel_info", &matmul_kernel_info_cuda);
}

}  // namespace pygpukit
