// Plain FP32 GEMM: a classic shared-memory tiled SIMT kernel. A 64x64 tile
// per block of 256 threads, each thread accumulating a 4x4 sub-tile with
// fmaf. Operands are read through (row stride, column stride) pairs, so one
// instantiation covers every layout.
#include <algorithm>

#include "epilogue.cuh"
#include "fma_gemm.h"
#include "int_math.h"

namespace pygpukit {
namespace {

constexpr int kTile = 64, kTileK = 16, kThreads = 256;

// Loads the kTile x kTileK block of X(r, k) = X[r * stride_r + k * stride_k]
// into shared memory as s[k][r], zero-filling outside rows x depth. Threads
// walk the block along whichever index is contiguous in memory, so the
// global loads coalesce for row- and column-major operands alike.
__device__ __forceinline__ void load_block(float (&s)[kTileK][kTile + 1], const float* X,
                                           int64_t stride_r, int64_t stride_k, int64_t r0,
                                           int64_t k0, int64_t rows, int64_t depth, int tid) {
  const bool k_contiguous = stride_k == 1;
#pragma unroll
  for (int i = 0; i < kTile * kTileK / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    const int r = k_contiguous ? idx / kTileK : idx % kTile;
    const int k = k_contiguous ? idx % kTileK : idx / kTile;
    const int64_t gr = r0 + r, gk = k0 + k;
    s[k][r] = (gr < rows && gk < depth) ? X[gr * stride_r + gk * stride_k] : 0.0f;
  }
}

__global__ void __launch_bounds__(kThreads) fma_gemm_kernel(const GemmProblem p) {
  __shared__ float sa[kTileK][kTile + 1];
  __shared__ float sb[kTileK][kTile + 1];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int64_t m0 = int64_t(blockIdx.x) * kTile;
  const bool a_row = p.layout_a == Layout::kRowMajor;
  const bool b_row = p.layout_b == Layout::kRowMajor;
  // A(m, k) and B^T(n, k) as (stride along m or n, stride along k).
  const int64_t a_sr = a_row ? p.lda : 1, a_sk = a_row ? 1 : p.lda;
  const int64_t b_sr = b_row ? 1 : p.ldb, b_sk = b_row ? p.ldb : 1;

  // Batches and column tiles beyond the grid's z and y limits (65535) are
  // walked in loops: every block takes the same trips, so the barriers
  // inside stay uniform.
  for (int64_t batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    for (int64_t n0 = int64_t(blockIdx.y) * kTile; n0 < p.N; n0 += int64_t(gridDim.y) * kTile) {
      const float* A = p.A + batch * p.batch_stride_a;
      const float* B = p.B + batch * p.batch_stride_b;
      float acc[4][4] = {};
      for (int64_t k0 = 0; k0 < p.K; k0 += kTileK) {
        __syncthreads();
        load_block(sa, A, a_sr, a_sk, m0, k0, p.M, p.K, tid);
        load_block(sb, B, b_sr, b_sk, n0, k0, p.N, p.K, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kTileK; ++k) {
          float a[4], b[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = sa[k][ty + 16 * i];
#pragma unroll
          for (int j = 0; j < 4; ++j) b[j] = sb[k][tx + 16 * j];
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
      }
      float* C = p.C + batch * p.batch_stride_c;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = m0 + ty + 16 * i;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t col = n0 + tx + 16 * j;
          if (row < p.M && col < p.N)
            C[row * p.ldc + col] = epilogue_value(p.epilogue, acc[i][j], col);
        }
      }
    }
  }
}

}  // namespace

cudaError_t launch_fma_gemm(const GemmProblem& p, cudaStream_t stream) {
  // M (which batch folding makes large) on x, whose limit is 2^31 - 1; N
  // and batch on y and z, capped at their limit of 65535 (the kernel loops
  // over the rest: N > 4194240 failed to launch before).
  constexpr int64_t kMaxGridYZ = 65535;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.M, kTile)),
                  static_cast<unsigned>(std::min(ceil_div(p.N, kTile), kMaxGridYZ)),
                  static_cast<unsigned>(std::min(p.batch, kMaxGridYZ)));
  fma_gemm_kernel<<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace pygpukit
