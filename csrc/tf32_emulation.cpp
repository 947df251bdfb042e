#include "tf32_emulation.h"

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

at::Tensor emulated_operand(const at::Tensor& x, Precision precision) {
  return (precision == Precision::kTF32 ? round_to_tf32(x) : x).to(at::kDouble);
}

}  // namespace pygpukit
