#include "ops/tf32_emulation.h"

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

// x with each broadcast dimension (stride 0, e.g. from expand) cut to one
// element: the elementwise rounding and the float64 copies below then cost
// the operand's real data, not its broadcast size (a weight expanded over a
// batch of 64 took 64 full copies per temporary), and expanding the results
// back gives at::matmul the same stride-0 operands torch.matmul sees.
at::Tensor without_broadcast(const at::Tensor& x) {
  at::Tensor compact = x;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.stride(d) == 0 && x.size(d) > 1) compact = compact.narrow(d, 0, 1);
  return compact;
}

}  // namespace

at::Tensor emulated_matmul(const at::Tensor& a_in, const at::Tensor& b_in, Precision precision) {
  const at::Tensor a = without_broadcast(a_in), b = without_broadcast(b_in);
  auto as_a = [&](const at::Tensor& t) { return t.expand(a_in.sizes()); };
  auto as_b = [&](const at::Tensor& t) { return t.expand(b_in.sizes()); };
  if (precision == Precision::kIEEE || precision == Precision::kFP32)
    return at::matmul(as_a(a.to(at::kDouble)), as_b(b.to(at::kDouble)));
  if (precision == Precision::kTF32)
    return at::matmul(as_a(round_to_tf32(a).to(at::kDouble)), as_b(round_to_tf32(b).to(at::kDouble)));
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
  return at::matmul(as_a(a_small), as_b(b_corr)) + at::matmul(as_a(a_corr), as_b(b_small)) +
         at::matmul(as_a(a_big), as_b(b_big));
}

}  // namespace pygpukit
