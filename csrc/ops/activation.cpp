#include "ops/activation.h"

#include <array>
#include <string>
#include <string_view>
#include <utility>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "ops/error_format.h"

namespace pygpukit {
namespace {

// Also the order in which an error message lists them.
constexpr std::array<std::pair<const char*, Activation>, 5> kActivations = {{
    {"none", Activation::kNone},
    {"relu", Activation::kRelu},
    {"gelu", Activation::kGelu},
    {"gelu_tanh", Activation::kGeluTanh},
    {"silu", Activation::kSilu},
}};

}  // namespace

std::optional<Activation> activation_named(c10::string_view name) {
  for (const auto& [known, act] : kActivations) {
    if (name == known) return act;
  }
  return std::nullopt;
}

Activation parse_activation(c10::string_view name, const char* op) {
  if (const std::optional<Activation> act = activation_named(name)) return *act;
  // Built only for the error: every call parses its activation.
  std::string valid;
  for (const auto& [known, act] : kActivations) {
    valid += (valid.empty() ? "'" : ", '") + std::string(known) + "'";
  }
  TORCH_CHECK_VALUE(false, op, ": unknown activation '",
                    printable(std::string_view(name.data(), name.size())), "'; expected one of ", valid);
}

at::Tensor apply_activation(const at::Tensor& y, Activation act) {
  switch (act) {
    case Activation::kRelu:
      return at::relu(y);
    case Activation::kGelu:
      return at::gelu(y);
    case Activation::kGeluTanh:
      return at::gelu(y, "tanh");
    case Activation::kSilu:
      return at::silu(y);
    case Activation::kNone:
    default:
      return y;
  }
}

}  // namespace pygpukit
