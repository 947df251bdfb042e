// Staging copy of a GEMM operand into the K-major, 16-byte-aligned layout that
// TMA and TF32 wgmma need, for operands that cannot be read in place.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace pygpukit {

// Row stride, in floats, of a packed K-major operand: K rounded up to 4, so
// every row starts 16-byte aligned.
__host__ __device__ inline int64_t packed_ld(int64_t K) { return (K + 3) / 4 * 4; }

// dst[b][r][k] = src(b, r, k) for b < batch, r < rows, k < K, where src(b, r,
// k) is src[b * batch_stride + r * ld + k] if k_major, else
// src[b * batch_stride + k * ld + r] (an MN-major operand, transposed on the
// way). dst rows are packed_ld(K) floats apart, batch entries rows *
// packed_ld(K); the padding columns are left unwritten (TMA never reads
// them: the tensor map's K is the true K). Runs on `stream`, no sync.
cudaError_t launch_pack_kmajor(const float* src, bool k_major, int64_t ld, int64_t batch_stride,
                               int64_t rows, int64_t K, int64_t batch, float* dst,
                               cudaStream_t stream);

}  // namespace pygpukit
