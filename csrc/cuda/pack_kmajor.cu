// A 32x32-tiled copy/transpose through shared memory: reads coalesced along
// whichever of r or k is contiguous in the source, writes coalesced along k.
#include "pack_kmajor.h"

namespace pygpukit {
namespace {

constexpr int kTile = 32, kRowsPerPass = 8;

// One 32x32 (r, k) tile of one batch entry.
__device__ __forceinline__ void pack_tile(const float* __restrict__ s, bool k_major, int64_t ld,
                                          int64_t rows, int64_t K, int64_t r0, int64_t k0,
                                          float* __restrict__ dst, int64_t ldp,
                                          float (&tile)[kTile][kTile + 1]) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int i = ty; i < kTile; i += kRowsPerPass) {
    if (k_major) {  // tile[r][k], lanes along k
      const int64_t r = r0 + i, k = k0 + tx;
      if (r < rows && k < K) tile[i][tx] = s[r * ld + k];
    } else {  // lanes along r
      const int64_t r = r0 + tx, k = k0 + i;
      if (r < rows && k < K) tile[tx][i] = s[k * ld + r];
    }
  }
  __syncthreads();
  for (int i = ty; i < kTile; i += kRowsPerPass) {
    const int64_t r = r0 + i, k = k0 + tx;
    if (r < rows && k < K) dst[r * ldp + k] = tile[i][tx];
  }
  __syncthreads();  // the tile is reused by the next iteration
}

__global__ void pack_kmajor_kernel(const float* __restrict__ src, bool k_major, int64_t ld,
                                   int64_t batch_stride, int64_t rows, int64_t K, int64_t batch,
                                   float* __restrict__ dst) {
  __shared__ float tile[kTile][kTile + 1];  // +1: conflict-free column access
  const int64_t k0 = int64_t(blockIdx.x) * kTile;
  const int64_t ldp = packed_ld(K);
  // gridDim.y and gridDim.z are capped at 65535: larger counts loop.
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    for (int64_t r0 = int64_t(blockIdx.y) * kTile; r0 < rows; r0 += int64_t(gridDim.y) * kTile) {
      pack_tile(src + b * batch_stride, k_major, ld, rows, K, r0, k0, dst + b * rows * ldp, ldp, tile);
    }
  }
}

}  // namespace

cudaError_t launch_pack_kmajor(const float* src, bool k_major, int64_t ld, int64_t batch_stride,
                               int64_t rows, int64_t K, int64_t batch, float* dst,
                               cudaStream_t stream) {
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const dim3 grid(unsigned((K + kTile - 1) / kTile), unsigned(row_tiles < 65535 ? row_tiles : 65535),
                  unsigned(batch < 65535 ? batch : 65535));
  pack_kmajor_kernel<<<grid, dim3(kTile, kRowsPerPass), 0, stream>>>(src, k_major, ld,
                                                                      batch_stride, rows, K,
                                                                      batch, dst);
  return cudaGetLastError();
}

}  // namespace pygpukit
