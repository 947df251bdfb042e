// Integer arithmetic of tiles, splits and workspaces, for host and device
// code (nvcc only).
#pragma once

#include <cstdint>

namespace pygpukit {

// ceil(a / b), for a >= 0 and b > 0.
__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// a rounded up to a multiple of b, for a >= 0 and b > 0.
__host__ __device__ constexpr int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

}  // namespace pygpukit
