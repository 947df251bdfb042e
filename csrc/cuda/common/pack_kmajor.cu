// A 64x64-tiled copy/transpose through shared memory: reads coalesced along
// whichever of r or k is contiguous in the source, writes coalesced along k
// (in each of the three segments for a 3xTF32 split).
#include "cuda/common/pack_kmajor.h"

#include "cuda/common/int_math.h"
#include "cuda/launch_util.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tf32_split.cuh"

namespace pygpukit {
namespace {

constexpr int kTile = 64, kRowsPerPass = 8;

// Writes the packed form of x (one element, or three per PackSplit) at
// column k of the row at `row`.
__device__ __forceinline__ void store_packed(float* __restrict__ row, int64_t K, int64_t k,
                                             float x, PackSplit split) {
  if (split == PackSplit::kNone) {
    row[k] = x;
    return;
  }
  const Tf32Parts x3 = tf32_split(x);
  if (split == PackSplit::kPartsAligned) {
    const int64_t segment = packed_ld(K);
    row[k] = x3.big;
    row[segment + k] = x3.small;
    row[2 * segment + k] = x3.corr;
    return;
  }
  row[k] = split == PackSplit::kSmallBigBig ? x3.small : x3.corr;
  row[K + k] = split == PackSplit::kSmallBigBig ? x3.corr : x3.small;
  row[2 * K + k] = x3.big;
}

// One kTile x kTile (r, k) tile of one batch entry. Every thread issues all
// its kTile * kTile / 256 loads before the first shared-memory store, so
// each SM keeps ~128 KB of reads in flight; with one 32x32 tile per block
// and 4 loads per thread, the pack ran at half the rate of a device copy on
// the H200.
__device__ __forceinline__ void pack_tile(const float* __restrict__ s, bool k_major, int64_t ld,
                                          int64_t rows, int64_t K, int64_t r0, int64_t k0,
                                          PackSplit split, float* __restrict__ dst, int64_t ldp,
                                          float (&tile)[kTile][kTile + 1]) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  constexpr int kPasses = kTile / kRowsPerPass, kLaneCols = kTile / 32;
  // Columns stored per segment: K, or kPartsAligned's zero padding too (the
  // loads below give 0 past K; the grid's kTile-wide column tiles reach it).
  const int64_t cols = split == PackSplit::kPartsAligned ? packed_ld(K) : K;
  float v[kPasses][kLaneCols];
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
#pragma unroll
    for (int c = 0; c < kLaneCols; ++c) {
      const int i = ty + pass * kRowsPerPass, j = tx + 32 * c;
      // Lanes run along whichever of k (K-major source) or r is contiguous.
      const int64_t r = r0 + (k_major ? i : j), k = k0 + (k_major ? j : i);
      v[pass][c] = r < rows && k < K ? s[k_major ? r * ld + k : k * ld + r] : 0.0f;
    }
  }
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
#pragma unroll
    for (int c = 0; c < kLaneCols; ++c) {
      const int i = ty + pass * kRowsPerPass, j = tx + 32 * c;
      if (k_major) tile[i][j] = v[pass][c];  // tile[r][k]
      else tile[j][i] = v[pass][c];
    }
  }
  __syncthreads();
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
#pragma unroll
    for (int c = 0; c < kLaneCols; ++c) {
      const int i = ty + pass * kRowsPerPass, j = tx + 32 * c;
      const int64_t r = r0 + i, k = k0 + j;
      if (r < rows && k < cols) store_packed(dst + r * ldp, K, k, tile[i][j], split);
    }
  }
  __syncthreads();  // the tile is reused by the next iteration
}

__global__ void pack_kmajor_kernel(const float* __restrict__ src, bool k_major, int64_t ld,
                                   int64_t batch_stride, int64_t rows, int64_t K, int64_t batch,
                                   PackSplit split, float* __restrict__ dst) {
  __shared__ float tile[kTile][kTile + 1];  // +1: conflict-free column access
  ptx::programmatic_launch_start();  // launch_util.h, launch_kernel
  const int64_t k0 = int64_t(blockIdx.x) * kTile;
  const int64_t ldp = packed_ld(packed_cols(K, split));
  // gridDim.y and gridDim.z are capped at 65535: larger counts loop.
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    for (int64_t r0 = int64_t(blockIdx.y) * kTile; r0 < rows; r0 += int64_t(gridDim.y) * kTile) {
      pack_tile(src + b * batch_stride, k_major, ld, rows, K, r0, k0, split, dst + b * rows * ldp,
                ldp, tile);
    }
  }
}

}  // namespace

cudaError_t launch_pack_kmajor(const float* src, bool k_major, int64_t ld, int64_t batch_stride,
                               int64_t rows, int64_t K, int64_t batch, PackSplit split,
                               float* dst, cudaStream_t stream) {
  const int64_t row_tiles = ceil_div(rows, kTile);
  const dim3 grid(unsigned(ceil_div(K, kTile)), unsigned(row_tiles < 65535 ? row_tiles : 65535),
                  unsigned(batch < 65535 ? batch : 65535));
  return launch_kernel<pack_kmajor_kernel>(grid, dim3(32, kRowsPerPass), KernelNeeds{}, stream, src, k_major,
                                           ld, batch_stride, rows, K, batch, split, dst);
}

}  // namespace pygpukit
