#include "matmul_args.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <c10/util/Exception.h>
#include <c10/util/safe_numerics.h>

#include "error_format.h"
#include "settings.h"

namespace pygpukit {

MatmulShapes check_matmul_args(const at::Tensor& a, const at::Tensor& b) {
  // The schema takes None for an undefined tensor.
  TORCH_CHECK(a.defined() && b.defined(), "matmul_tf32: expected tensors, got None for ",
              a.defined() ? "b" : "a");
  TORCH_CHECK(a.dim() >= 1 && b.dim() >= 1,
              "matmul_tf32: both arguments need at least 1 dimension, got a.dim() = ", num(a.dim()),
              " and b.dim() = ", num(b.dim()));
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
              "matmul_tf32: expected float32 tensors, got a of dtype ", a.scalar_type(),
              " and b of dtype ", b.scalar_type());
  TORCH_CHECK(a.layout() == at::kStrided && b.layout() == at::kStrided,
              "matmul_tf32: expected dense (strided) tensors, got a with layout ", a.layout(),
              " and b with layout ", b.layout());
  TORCH_CHECK(a.device() == b.device(), "matmul_tf32: expected a and b on the same device, got a on ",
              a.device(), " and b on ", b.device());

  MatmulShapes s;
  s.K = a.size(-1);
  const int64_t b_k = b.dim() == 1 ? b.size(0) : b.size(-2);
  TORCH_CHECK(s.K == b_k, "matmul_tf32: shapes cannot be multiplied: a has shape ", shape(a.sizes()),
              " and b has shape ", shape(b.sizes()), " (a.size(-1) = ", num(s.K), " but b.size(",
              b.dim() == 1 ? "0" : "-2", ") = ", num(b_k), ")");
  s.M = a.dim() >= 2 ? a.size(-2) : 1;
  s.N = b.dim() >= 2 ? b.size(-1) : 1;

  // Broadcast the batch dimensions, aligned from the right.
  const int64_t a_batch = std::max<int64_t>(a.dim() - 2, 0);
  const int64_t b_batch = std::max<int64_t>(b.dim() - 2, 0);
  const int64_t n_batch = std::max(a_batch, b_batch);
  s.batch.assign(n_batch, 1);
  for (int64_t i = 0; i < n_batch; ++i) {
    const int64_t ai = i - (n_batch - a_batch), bi = i - (n_batch - b_batch);
    const int64_t as = ai >= 0 ? a.size(ai) : 1, bs = bi >= 0 ? b.size(bi) : 1;
    TORCH_CHECK(as == bs || as == 1 || bs == 1,
                "matmul_tf32: batch dimensions cannot be broadcast: a has shape ", shape(a.sizes()),
                " and b has shape ", shape(b.sizes()), " (", num(as), " vs ", num(bs),
                " at batch dimension ", num(i), ")");
    s.batch[i] = as == 1 ? bs : as;
  }
  s.out = s.batch;
  if (a.dim() >= 2) s.out.push_back(s.M);
  if (b.dim() >= 2) s.out.push_back(s.N);
  // The result's elements must be countable in int64_t (expanded operands
  // can describe more), as torch.matmul checks before allocating; an empty
  // result is fine whatever its other sizes.
  uint64_t numel = 1;
  bool overflow = false, empty = false;
  for (const int64_t d : s.out) {
    overflow |= c10::mul_overflows(numel, uint64_t(d), &numel);
    empty |= d == 0;
  }
  TORCH_CHECK(empty || (!overflow && numel <= uint64_t(std::numeric_limits<int64_t>::max())),
              "matmul_tf32: the result of a with shape ",
              shape(a.sizes()), " and b with shape ", shape(b.sizes()), " would have shape ", shape(s.out),
              ", more elements than int64_t can count");
  return s;
}

Precision parse_precision(std::optional<c10::string_view> precision, const char* op) {
  if (!precision.has_value()) return default_precision(op);
  const auto p = precision_named(std::string_view(precision->data(), precision->size()));
  TORCH_CHECK_VALUE(p.has_value(), op, ": precision must be 'tf32', 'tf32x3', 'ieee' or None, got '",
                    printable(std::string_view(precision->data(), precision->size())), "'");
  return *p;
}

}  // namespace pygpukit
