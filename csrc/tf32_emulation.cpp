#include "tf32_emulation.h"

#include <array>

#include <ATen/ATen.h>

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

}  // namespace

at::Tensor emulated_matmul(const at::Tensor& a, const at::Tensor& b, Precision precision) {
  if (precision == Precision::kIEEE) return at::matmul(a.to(at::kDouble), b.to(at::kDouble));
  if (precision == Precision::kTF32)
    return at::matmul(round_to_tf32(a).to(at::kDouble), round_to_tf32(b).to(at::kDouble));
  // 3xTF32: (big, big for the corrections, small) of each operand. As in the
  // CUDA split (tf32_split.cuh), a finite x that rounds past FLT_MAX is
  // truncated instead, so that big stays finite and x - big exact, and its
  // small part is truncated too, so that big + small stays finite.
  auto truncate_to_tf32 = [](const at::Tensor& t) {
    return t.contiguous().view(at::kInt).bitwise_and(static_cast<int32_t>(0xFFFFE000u)).view(at::kFloat);
  };
  auto split = [&](const at::Tensor& x) {
    const at::Tensor finite = x.isfinite();
    at::Tensor big = round_to_tf32(x);
    const at::Tensor past_max = finite & big.isinf();
    big = at::where(past_max, truncate_to_tf32(x), big);
    const at::Tensor rest = x - big;
    const at::Tensor small = at::where(past_max, truncate_to_tf32(rest), round_to_tf32(rest));
    const at::Tensor zero = at::zeros_like(x);
    return std::array<at::Tensor, 3>{big.to(at::kDouble),
                                     at::where(finite, big, zero).to(at::kDouble),
                                     at::where(finite, small, zero).to(at::kDouble)};
  };
  const auto [a_big, a_corr, a_small] = split(a);
  const auto [b_big, b_corr, b_small] = split(b);
  return at::matmul(a_small, b_corr) + at::matmul(a_corr, b_small) + at::matmul(a_big, b_big);
}

}  // namespace pygpukit
