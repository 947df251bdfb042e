// Staging copy of a GEMM operand into the K-major, 16-byte-aligned layout that
// TMA and TF32 wgmma need, for operands that cannot be read in place.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/int_math.h"

namespace pygpukit {

// Row stride, in floats, of a packed K-major operand: K rounded up to 32, so
// every row starts 128-byte aligned and each 128-byte TMA box row is one
// whole L2 line (rounded up to 4 only, K = 4099 put every box row across two
// lines: the H200 ran the 4095x4097x4099 GEMM on the packed operands in
// 563 us instead of 518).
__host__ __device__ inline int64_t packed_ld(int64_t K) { return round_up(K, 32); }

// What a packed row holds. kNone: the K values. The 3xTF32 splits: three
// segments of K columns each, made of big = tf32(x) (round to nearest even,
// so TF32 rounding leaves it unchanged) and small = x - big:
//   kSmallBigBig [small | big | big] for A and kBigSmallBig [big | small |
//   big] for B, so that one TF32 GEMM over the 3K columns computes
//   a_small*b_big + a_big*b_small + a_big*b_big, small terms first.
// For a non-finite x the first two segments hold 0, so Inf and NaN enter
// only big*big, as in a TF32 GEMM.
//   kPartsAligned [big | small | corr] for a kernel that reads each part of
//   a k-tile on its own (WgmmaSplit3SwapAB, which splits the other operand
//   in registers): corr is big for a finite x and 0 otherwise (it multiplies
//   the other operand's small part), and each segment takes packed_ld(K)
//   columns, zero past K, so that a k-tile's box starts 128-byte aligned and
//   never reaches into the next segment.
enum class PackSplit { kNone, kSmallBigBig, kBigSmallBig, kPartsAligned };

// Columns of a packed row: K, 3K for a 3xTF32 split, 3 packed_ld(K) for
// kPartsAligned.
__host__ __device__ inline int64_t packed_cols(int64_t K, PackSplit split) {
  if (split == PackSplit::kPartsAligned) return 3 * packed_ld(K);
  return split == PackSplit::kNone ? K : 3 * K;
}

// dst[b][r][c] for b < batch, r < rows, made from src(b, r, k), k < K, per
// `split`; src(b, r, k) is src[b * batch_stride + r * ld + k] if k_major,
// else src[b * batch_stride + k * ld + r] (an MN-major operand, transposed
// on the way). dst rows are packed_ld(packed_cols(K, split)) floats apart,
// batch entries rows times that; the padding columns are left unwritten
// (TMA never reads them: the tensor map has the true column count), except
// kPartsAligned's, which are zeros. Runs on
// `stream`, no sync.
cudaError_t launch_pack_kmajor(const float* src, bool k_major, int64_t ld, int64_t batch_stride,
                               int64_t rows, int64_t K, int64_t batch, PackSplit split,
                               float* dst, cudaStream_t stream);

}  // namespace pygpukit
