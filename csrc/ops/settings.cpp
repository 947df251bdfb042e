#include "ops/settings.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/library.h>

#include "ops/error_format.h"

namespace pygpukit {
namespace {

// One environment variable as the process first saw it.
struct Variable {
  const char* name;
  const char* advice;  // how to change the setting while the process runs, or ""
  std::optional<std::string> value;  // nullopt: unset

  Variable(const char* n, const char* a) : name(n), advice(a), value(now()) {}

  // The environment's value now; empty counts as unset.
  std::optional<std::string> now() const {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::optional<std::string>(v) : std::nullopt;
  }

  // The value; RuntimeError naming `op` if the environment now says
  // otherwise: a silent change would apply to eager calls but not to CUDA
  // graphs recorded before it, nor to code compiled before it.
  const std::optional<std::string>& checked(const char* op) const {
    const std::optional<std::string> current = now();
    TORCH_CHECK(current == value, op, ": the environment variable ", name, " changed from ", shown(value),
                " to ", shown(current),
                " after the first pygpukit call read it; it is read once per process: set it before "
                "the first call", advice);
    return value;
  }

  static std::string shown(const std::optional<std::string>& v) {
    return v ? "'" + printable(*v) + "'" : std::string("unset");
  }
};

enum class Env { kPrecision, kAllowTF32, kKernel, kStreamK };

const Variable& variable(Env which) {
  constexpr const char* kPrecisionAdvice =
      ", or use pygpukit_torch.default_precision(...) to change the setting while the process runs";
  static const std::array<Variable, 4> variables = {
      Variable("PYGPUKIT_PRECISION", kPrecisionAdvice), Variable("PYGPUKIT_ALLOW_TF32", kPrecisionAdvice),
      Variable("PYGPUKIT_KERNEL",
               ", or use pygpukit_torch.force_kernel(...) to change the setting while the process runs"),
      Variable("PYGPUKIT_STREAM_K", "")};
  return variables[size_t(which)];
}

// Overrides: -1 for none, else the enumerator's value.
std::atomic<int> precision_override{-1};
std::atomic<int> kernel_override{-1};

std::optional<ForcedKernel> kernel_named(std::string_view name) {
  for (size_t i = 0; i < std::size(kForceableKernels); ++i)
    if (name == kForceableKernels[i]) return ForcedKernel(int(i));
  return std::nullopt;
}

std::string kernel_choices() {
  std::string s;
  for (size_t i = 0; i < std::size(kForceableKernels); ++i)
    s += (i == 0 ? "'" : i + 1 == std::size(kForceableKernels) ? " or '" : ", '") +
         std::string(kForceableKernels[i]) + "'";
  return s;
}

// PYGPUKIT_ALLOW_TF32 = 0 / false / no / off disallows TF32, 1 / true /
// yes / on (or unset, or blank) allows it (any case, surrounding whitespace
// ignored, as a shell or .env file may leave it); anything else throws
// ValueError naming `op`, rather than quietly meaning one of them.
bool disallows_tf32(const std::optional<std::string>& env, const char* op) {
  std::string v = env.value_or("");
  const auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!v.empty() && is_space(v.back())) v.pop_back();
  v.erase(v.begin(), std::find_if_not(v.begin(), v.end(), is_space));
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "0" || v == "false" || v == "no" || v == "off") return true;
  TORCH_CHECK_VALUE(v.empty() || v == "1" || v == "true" || v == "yes" || v == "on", op,
                    ": the environment variable PYGPUKIT_ALLOW_TF32 must be 0/false/no/off or 1/true/yes/on, "
                    "got '", printable(*env), "'");
  return false;
}

// The overrides, as pygpukit_torch's with blocks set them (nullopt clears).
void set_precision(std::optional<c10::string_view> precision) {
  if (!precision) return precision_override.store(-1, std::memory_order_release);
  const std::string_view name(precision->data(), precision->size());
  const auto p = precision_named(name);
  TORCH_CHECK_VALUE(p.has_value(), "default_precision: unknown precision '", printable(name),
                    "'; expected one of ", kPrecisionNames);
  precision_override.store(int(*p), std::memory_order_release);
}

void set_kernel(std::optional<c10::string_view> kernel) {
  if (!kernel) return kernel_override.store(-1, std::memory_order_release);
  const std::string_view name(kernel->data(), kernel->size());
  const auto k = kernel_named(name);
  TORCH_CHECK_VALUE(k.has_value(), "force_kernel: unknown kernel '", printable(name), "'; expected ",
                    kernel_choices());
  kernel_override.store(int(*k), std::memory_order_release);
}

}  // namespace

Precision default_precision(const char* op) {
  // Read (and checked) even under an override, so that the first call
  // takes the process's values whatever blocks are open.
  const auto& env = variable(Env::kPrecision).checked(op);
  const auto& allow = variable(Env::kAllowTF32).checked(op);
  if (const int o = precision_override.load(std::memory_order_acquire); o >= 0) return Precision(o);
  if (env) {
    const auto p = precision_named(*env);
    TORCH_CHECK_VALUE(p.has_value(), op,
                      ": the environment variable PYGPUKIT_PRECISION must be one of ", kPrecisionNames,
                      ", got '", printable(*env), "'");
    return *p;
  }
  return disallows_tf32(allow, op) ? Precision::kIEEE : Precision::kTF32;
}

ForcedKernel forced_kernel(const char* op) {
  variable(Env::kStreamK).checked(op);  // read below the argument checks: checked here, once per GPU call
  const auto& env = variable(Env::kKernel).checked(op);  // read even under an override, as above
  if (const int o = kernel_override.load(std::memory_order_acquire); o >= 0) return ForcedKernel(o);
  if (!env) return ForcedKernel::kAuto;
  const auto k = kernel_named(*env);
  TORCH_CHECK_VALUE(k.has_value(), op, ": the environment variable PYGPUKIT_KERNEL must be ",
                    kernel_choices(), ", got '", printable(*env), "'");
  return *k;
}

bool stream_k_allowed() { return variable(Env::kStreamK).value != "0"; }

std::optional<Precision> precision_named(std::string_view name) {
  if (name == "tf32") return Precision::kTF32;
  if (name == "tf32x3") return Precision::kTF32x3;
  if (name == "ieee") return Precision::kIEEE;
  if (name == "fp32") return Precision::kFP32;
  return std::nullopt;
}

// For pygpukit_torch's with blocks (precision.py, dispatch.py), which keep
// the stack of open blocks and set what the innermost one says.
TORCH_LIBRARY_FRAGMENT(pygpukit, m) {
  m.def("_set_default_precision(str? precision) -> ()", &set_precision);
  m.def("_set_forced_kernel(str? kernel) -> ()", &set_kernel);
  // The names force_kernel takes (pygpukit_torch.dispatch.KERNELS).
  m.def("_forceable_kernels() -> str[]", [] {
    return std::vector<std::string>(std::begin(kForceableKernels), std::end(kForceableKernels));
  });
}

}  // namespace pygpukit
