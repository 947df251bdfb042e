// The process-wide settings of the pygpukit operators: the precision of calls
// that name none, the kernel family forced on the GPU, and whether the Hopper
// path may use stream-K. Each comes from its environment variable, read once
// at the first call that needs it, unless a with block in Python
// (pygpukit_torch.default_precision, pygpukit_torch.force_kernel) overrides
// it. Every call reads each setting once, so a change from another thread
// never splits a call between two values, and nothing writes the
// environment.
#pragma once

#include <optional>
#include <string_view>

#include "ops/gemm_types.h"

namespace pygpukit {

// The default precision: the override, else PYGPUKIT_PRECISION ("tf32",
// "tf32x3", "fp32" or "ieee"; empty counts as unset), else "ieee" where
// PYGPUKIT_ALLOW_TF32 is 0 / false / no / off (any case, surrounding
// whitespace ignored), else "tf32". Throws ValueError naming `op` for a
// PYGPUKIT_PRECISION that is none of those names, and RuntimeError where
// either variable changed after it was read.
Precision default_precision(const char* op);

// The forced kernel family: the override, else PYGPUKIT_KERNEL (empty counts
// as unset, i.e. "auto"). Throws as default_precision does, for a name that
// is not in kForceableKernels.
ForcedKernel forced_kernel(const char* op);

// False where PYGPUKIT_STREAM_K is "0" (to measure what stream-K gains).
// Never throws (called below the operators' argument checks); a change of
// the variable raises at forced_kernel, which every GPU call reads.
bool stream_k_allowed();

// The precision of that name ("tf32", "tf32x3", "fp32", "ieee"), or nullopt.
std::optional<Precision> precision_named(std::string_view name);

}  // namespace pygpukit
