#include "cuda/gemm_adapter.h"

#include <optional>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

#include "ops/settings.h"
#include "cuda/launch_util.h"

namespace pygpukit {
namespace {

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

}  // namespace

// A dimension of size 1 has no meaningful stride, so it never forces a copy;
// a stride-0 (expanded) leading dimension is fine too, since the kernel only
// reads.
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

void set_operands(GemmProblem& p, const Operand& A, const Operand& B) {
  p.A = A.ptr;
  p.lda = A.ld;
  p.layout_a = A.layout;
  p.batch_stride_a = A.batch_stride;
  p.B = B.ptr;
  p.ldb = B.ld;
  p.layout_b = B.layout;
  p.batch_stride_b = B.batch_stride;
}

void run_gemm_checked(const GemmProblem& problem, Precision precision, const char* op) {
  GemmProblem p = problem;
  p.forced = forced_kernel(op);
  // Scratch (staged operands, split-K partials: gemm_workspace_bytes), from
  // torch's caching allocator on the current device and stream: freed back
  // to it, and reusable, once the stream's work is done.
  failed_step = nullptr;
  const size_t workspace_bytes = gemm_workspace_bytes(p, precision);
  at::Tensor workspace;
  if (workspace_bytes > 0)
    workspace = at::empty({static_cast<int64_t>(workspace_bytes)},
                          at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  const cudaError_t err =
      run_gemm(p, precision, workspace_bytes > 0 ? workspace.data_ptr() : nullptr,
               workspace_bytes, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, op, ": kernel launch failed (", describe_gemm(p, precision),
              "): ", cudaGetErrorString(err), failed_step ? std::string(" (at ") + failed_step + ")" : "");
}

}  // namespace pygpukit
