// Which output tile a threadblock computes. Shared by every tiled GEMM kernel.
#pragma once

#include <cstdint>

#include "cuda/common/int_math.h"

namespace pygpukit {

struct TileCoord {
  int64_t m, n;  // tile indices along M and N
};

// Grouped rasterization of a linear tile index over a tiles_m x tiles_n grid:
// consecutive indices walk down a column of kGroupM tile rows before moving
// to the next tile column, so the ~kGroupM * tiles_n threadblocks resident at
// once share A row panels and B column panels in L2 (the "grouped ordering"
// of Triton's matmul tutorial).
template <int64_t kGroupM>
__device__ __forceinline__ TileCoord grouped_tile(int64_t index, int64_t tiles_m,
                                                  int64_t tiles_n) {
  const int64_t group_size = kGroupM * tiles_n;
  const int64_t first_m = (index / group_size) * kGroupM;
  const int64_t group_m = min(tiles_m - first_m, kGroupM);
  return {first_m + (index % group_size) % group_m, (index % group_size) / group_m};
}

}  // namespace pygpukit
