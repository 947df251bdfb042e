#include "ops/matmul_args.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <c10/util/Exception.h>
#include <c10/core/SymBool.h>
#include <c10/util/safe_numerics.h>

#include "ops/error_format.h"
#include "ops/settings.h"

namespace pygpukit {

c10::SymDimVector matmul_result_shape(const at::Tensor& a, const at::Tensor& b) {
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

  // Sizes as SymInts: plain integers on real tensors; under torch.compile's
  // dynamic shapes, symbols whose checks become guards or, for sizes known
  // only at run time, deferred runtime assertions (TORCH_SYM_CHECK).
  const c10::SymIntArrayRef as = a.sym_sizes(), bs = b.sym_sizes();
  const c10::SymInt& k = as.back();
  const c10::SymInt& b_k = b.dim() == 1 ? bs[0] : bs[bs.size() - 2];
  TORCH_SYM_CHECK(k.sym_eq(b_k), "matmul_tf32: shapes cannot be multiplied: a has shape ", shape(as),
                  " and b has shape ", shape(bs), " (a.size(-1) = ", num(k), " but b.size(",
                  b.dim() == 1 ? "0" : "-2", ") = ", num(b_k), ")");

  // Broadcast the batch dimensions, aligned from the right: a size that is
  // 1 takes the other; otherwise the two must be equal (tested last, as
  // at::infer_size does, so that a size known only at run time is asserted
  // equal rather than guarded on).
  const int64_t a_batch = std::max<int64_t>(a.dim() - 2, 0);
  const int64_t b_batch = std::max<int64_t>(b.dim() - 2, 0);
  const int64_t n_batch = std::max(a_batch, b_batch);
  c10::SymDimVector out(n_batch, c10::SymInt(1));
  for (int64_t i = 0; i < n_batch; ++i) {
    const int64_t ai = i - (n_batch - a_batch), bi = i - (n_batch - b_batch);
    const c10::SymInt sa = ai >= 0 ? as[ai] : c10::SymInt(1), sb = bi >= 0 ? bs[bi] : c10::SymInt(1);
    if (TORCH_GUARD_OR_FALSE(sa.sym_eq(1))) {
      out[i] = sb;
    } else if (TORCH_GUARD_OR_FALSE(sb.sym_eq(1))) {
      out[i] = sa;
    } else {
      TORCH_SYM_CHECK(sa.sym_eq(sb), "matmul_tf32: batch dimensions cannot be broadcast: a has shape ",
                      shape(as), " and b has shape ", shape(bs), " (", num(sa), " vs ", num(sb),
                      " at batch dimension ", num(i), ")");
      out[i] = sa;
    }
  }
  if (a.dim() >= 2) out.push_back(as[as.size() - 2]);
  if (b.dim() >= 2) out.push_back(bs.back());
  // The result's elements, and those of each operand broadcast over the
  // batch dimensions, must be countable in int64_t (expanded operands can
  // describe more), as torch.matmul checks before allocating: counted as
  // torch counts a tensor's elements, so that an overflow before a zero
  // size still counts. Checked where every size is known: a bound on
  // symbolic sizes would add guards that sizes known only at run time
  // cannot satisfy.
  // The result's bytes too (float32): at::empty's own overflow error names
  // neither the op nor the operands.
  auto countable = [](c10::SymIntArrayRef sizes, uint64_t element_bytes) {
    uint64_t numel = 1;
    bool overflow = false;
    for (const c10::SymInt& d : sizes) {
      const std::optional<int64_t> v = d.maybe_as_int();
      if (!v) return true;
      overflow |= c10::mul_overflows(numel, uint64_t(*v), &numel);
    }
    return !overflow && numel <= uint64_t(std::numeric_limits<int64_t>::max()) / element_bytes;
  };
  TORCH_CHECK(countable(out, sizeof(float)), "matmul_tf32: the result of a with shape ", shape(as),
              " and b with shape ", shape(bs), " would have shape ", shape(out),
              ", more elements than int64_t can count (as float32 bytes)");
  c10::SymDimVector a_full(out.begin(), out.begin() + n_batch), b_full = a_full;
  a_full.push_back(a.dim() >= 2 ? as[as.size() - 2] : c10::SymInt(1));
  a_full.push_back(k);
  b_full.push_back(k);
  b_full.push_back(b.dim() >= 2 ? bs.back() : c10::SymInt(1));
  TORCH_CHECK(countable(a_full, 1) && countable(b_full, 1), "matmul_tf32: a with shape ", shape(as),
              " and b with shape ", shape(bs), " broadcast over the batch dimensions to ", shape(a_full),
              " and ", shape(b_full), ", more elements than int64_t can count");
  return out;
}

MatmulShapes check_matmul_args(const at::Tensor& a, const at::Tensor& b) {
  const c10::SymDimVector out = matmul_result_shape(a, b);
  MatmulShapes s;
  s.K = a.size(-1);
  s.M = a.dim() >= 2 ? a.size(-2) : 1;
  s.N = b.dim() >= 2 ? b.size(-1) : 1;
  for (const c10::SymInt& d : out) s.out.push_back(d.expect_int());
  const size_t n_batch = out.size() - (a.dim() >= 2) - (b.dim() >= 2);
  s.batch.assign(s.out.begin(), s.out.begin() + n_batch);
  return s;
}

Precision parse_precision(std::optional<c10::string_view> precision, const char* op) {
  if (!precision.has_value()) return default_precision(op);
  const auto p = precision_named(std::string_view(precision->data(), precision->size()));
  TORCH_CHECK_VALUE(p.has_value(), op, ": precision must be ", kPrecisionNames, " or None, got '",
                    printable(std::string_view(precision->data(), precision->size())), "'");
  return *p;
}

}  // namespace pygpukit
