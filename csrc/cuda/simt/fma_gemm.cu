// Plain FP32 GEMM: a register-blocked shared-memory SIMT kernel (the classic
// design: each thread owns an 8x8 or 4x4 block of C and reads its operands
// from shared memory in 16-byte vectors; double-buffered tiles, the next
// k-tile's global loads issued before this one's FMAs). Operands are read
// through (row stride, k stride) pairs with scalar loads, so any alignment
// works; the layouts are template parameters, which fix the order threads
// walk each operand's tile in.
#include <algorithm>

#include "cuda/common/epilogue.cuh"
#include "cuda/simt/fma_gemm.h"
#include "cuda/common/int_math.h"
#include "cuda/common/splitk_reduce.h"

namespace pygpukit {
namespace {

// Shared-memory rows (one per k) are padded by 4 floats: rows stay 16-byte
// aligned for the vector loads, and the stores of a k-contiguous operand
// (8 k by 4 rows per warp for BK = 8) fall in distinct banks; with BK = 16
// (16 k by 2 rows) two share each bank, on stores only, once per k-tile.
constexpr int kPad = 4;

// One operand's kRows x BK tile, X(r, k) = X[r * stride_r + k * stride_k],
// moved global -> registers -> shared memory (as s[k][r]) by 256 threads,
// kLoads elements each. Threads walk the tile along k where the operand is
// k-contiguous (row-major A, column-major B), else along r, so the global
// loads coalesce in either layout. Thread t's i-th element is (r, k) with
// r = t / BK + i * 256 / BK, k = t % BK (k-contiguous), or r = t % kRows,
// k = t / kRows + i * 256 / kRows: one pointer and compile-time strides
// describe them (a pointer per element, or runtime strides for both walks,
// spilled registers in the 8x8 configuration). Outside rows x [0, depth)
// it loads zeros, which add nothing to the FMAs.
template <int kRows, int BK, bool kKContiguous>
struct OperandTile {
  static constexpr int kLoads = kRows * BK / 256;
  static_assert(256 % BK == 0 && 256 % kRows == 0, "the element strides above need these");
  static constexpr int kRowDelta = kKContiguous ? 256 / BK : 0;
  static constexpr int kKDelta = kKContiguous ? 0 : 256 / kRows;
  static constexpr int kSmemDelta = kKDelta * (kRows + kPad) + kRowDelta;
  const float* ptr;  // element 0
  int64_t delta;     // from element i to i + 1, in memory
  int64_t step;      // BK along k
  int s_off;         // element 0's place in s[k][r], k * (kRows + kPad) + r
  int k_first;       // element 0's k
  int rows_ok;       // elements 0 .. rows_ok - 1 lie in rows inside the operand

  __device__ __forceinline__ void init(const float* X, int64_t stride_r, int64_t stride_k,
                                       int64_t r0, int64_t k_begin, int64_t rows, int tid) {
    const int r = kKContiguous ? tid / BK : tid % kRows;
    k_first = kKContiguous ? tid % BK : tid / kRows;
    s_off = k_first * (kRows + kPad) + r;
    step = int64_t(BK) * stride_k;
    delta = int64_t(kRowDelta) * stride_r + int64_t(kKDelta) * stride_k;
    const int64_t left = rows - r0 - r;  // rows from element 0's on
    if (kKContiguous)
      rows_ok = left <= 0 ? 0 : left >= int64_t(kLoads) * kRowDelta ? kLoads : int(ceil_div(left, kRowDelta));
    else
      rows_ok = left > 0 ? kLoads : 0;
    // A tile with no row inside never loads; its pointer stays at X.
    ptr = rows_ok > 0 ? X + (r0 + r) * stride_r + (k_begin + k_first) * stride_k : X;
  }

  // Loads the k-tile starting at k0 (of depth, counted from the range's
  // start) into v.
  __device__ __forceinline__ void fetch(float (&v)[kLoads], int64_t k0, int64_t depth) const {
#pragma unroll
    for (int i = 0; i < kLoads; ++i)
      v[i] = i < rows_ok && k0 + k_first + i * kKDelta < depth ? ptr[i * delta] : 0.0f;
  }
  __device__ __forceinline__ void advance() { ptr += step; }

  __device__ __forceinline__ void store(const float (&v)[kLoads], float* s) const {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) s[s_off + i * kSmemDelta] = v[i];
  }
};

// kARowMajor, kBRowMajor: the operands' layouts (p.layout_a, p.layout_b).
template <class C, bool kARowMajor, bool kBRowMajor>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocksPerSM)
    fma_gemm_kernel(const GemmProblem p, int splits, float* partials) {
  constexpr int TM = C::kThreadRows, TN = C::kThreadCols, BM = C::BM, BN = C::BN, BK = C::BK;
  __shared__ __align__(16) float sa[2][BK][BM + kPad];
  __shared__ __align__(16) float sb[2][BK][BN + kPad];
  const int tid = threadIdx.x;
  // Warps of 8 x 4 threads, arranged 2 x 4: per k, a warp's 16-byte loads
  // of A cover 4 distinct groups and of B 8, one shared-memory wavefront
  // each.
  const int warp = tid / 32, lane = tid % 32;
  const int tx = (warp % 2) * 8 + lane % 8;  // column group, 0..15
  const int ty = (warp / 2) * 4 + lane / 8;  // row group, 0..15
  const int64_t m0 = int64_t(blockIdx.x) * BM;
  // A(m, k) and B^T(n, k) as (stride along m or n, stride along k).
  const int64_t a_sr = kARowMajor ? p.lda : 1, a_sk = kARowMajor ? 1 : p.lda;
  const int64_t b_sr = kBRowMajor ? 1 : p.ldb, b_sk = kBRowMajor ? p.ldb : 1;
  using TileA = OperandTile<BM, BK, kARowMajor>;
  using TileB = OperandTile<BN, BK, !kBRowMajor>;
  const int64_t k_range = round_up(ceil_div(p.K, splits), BK);

  // Column tiles, batches and splits beyond the grid's y and z limits
  // (65535) are walked in loops: every block takes the same trips, so the
  // barriers inside stay uniform.
  for (int64_t z = blockIdx.z; z < p.batch * splits; z += gridDim.z) {
    const int64_t batch = z / splits, split = z % splits;
    const int64_t k_begin = split * k_range;
    const int64_t depth = (p.K < k_begin + k_range ? p.K : k_begin + k_range) - k_begin;
    const int64_t k_tiles = ceil_div(depth, BK);
    for (int64_t n0 = int64_t(blockIdx.y) * BN; n0 < p.N; n0 += int64_t(gridDim.y) * BN) {
      TileA ta;
      TileB tb;
      ta.init(p.A + batch * p.batch_stride_a, a_sr, a_sk, m0, k_begin, p.M, tid);
      tb.init(p.B + batch * p.batch_stride_b, b_sr, b_sk, n0, k_begin, p.N, tid);
      float va[TileA::kLoads], vb[TileB::kLoads];
      float acc[TM][TN] = {};
      ta.fetch(va, 0, depth);
      tb.fetch(vb, 0, depth);
      ta.advance();
      tb.advance();
      ta.store(va, &sa[0][0][0]);
      tb.store(vb, &sb[0][0][0]);
      __syncthreads();
      for (int64_t t = 0; t < k_tiles; ++t) {
        const int cur = t & 1;
        const bool next = t + 1 < k_tiles;
        if (next) {
          ta.fetch(va, (t + 1) * BK, depth);
          tb.fetch(vb, (t + 1) * BK, depth);
          ta.advance();
          tb.advance();
        }
#pragma unroll
        for (int k = 0; k < BK; ++k) {
          float a[TM], b[TN];
#pragma unroll
          for (int g = 0; g < TM / 4; ++g)
            *reinterpret_cast<float4*>(&a[4 * g]) =
                *reinterpret_cast<const float4*>(&sa[cur][k][64 * g + 4 * ty]);
#pragma unroll
          for (int g = 0; g < TN / 4; ++g)
            *reinterpret_cast<float4*>(&b[4 * g]) =
                *reinterpret_cast<const float4*>(&sb[cur][k][64 * g + 4 * tx]);
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        // The other buffer was last read in step t - 1, before the barrier
        // that ended it.
        if (next) {
          ta.store(va, &sa[cur ^ 1][0][0]);
          tb.store(vb, &sb[cur ^ 1][0][0]);
        }
        __syncthreads();
      }

      // Rows 64 * (i / 4) + 4 * ty + i % 4, columns likewise. Under split-K
      // the raw sums go to this range's partials, and the reduction applies
      // the epilogue.
      const bool raw = splits > 1;
      const int64_t ld = raw ? splitk_partials_ld(p.N) : p.ldc;
      float* out = raw ? partials + split * p.M * ld : p.C + batch * p.batch_stride_c;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int64_t row = m0 + 64 * (i / 4) + 4 * ty + i % 4;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const int64_t col = n0 + 64 * (j / 4) + 4 * tx + j % 4;
          if (row < p.M && col < p.N)
            out[row * ld + col] = raw ? acc[i][j] : epilogue_value(p.epilogue, acc[i][j], col);
        }
      }
    }
  }
}

}  // namespace

template <class Config>
cudaError_t launch_fma_gemm(const GemmProblem& p, int splits, float* partials,
                            cudaStream_t stream) {
  if (splits < 1 || (splits > 1 && (p.batch != 1 || partials == nullptr)))
    return cudaErrorInvalidValue;
  // M (which batch folding makes large) on x, whose limit is 2^31 - 1; N
  // and batch x splits on y and z, capped at their limit of 65535 (the
  // kernel loops over the rest).
  constexpr int64_t kMaxGridYZ = 65535;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.M, Config::BM)),
                  static_cast<unsigned>(std::min(ceil_div(p.N, Config::BN), kMaxGridYZ)),
                  static_cast<unsigned>(std::min(p.batch * splits, kMaxGridYZ)));
  const bool a_row = p.layout_a == Layout::kRowMajor, b_row = p.layout_b == Layout::kRowMajor;
  auto kernel = a_row ? (b_row ? fma_gemm_kernel<Config, true, true> : fma_gemm_kernel<Config, true, false>)
                      : (b_row ? fma_gemm_kernel<Config, false, true> : fma_gemm_kernel<Config, false, false>);
  kernel<<<grid, Config::kThreads, 0, stream>>>(p, splits, partials);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || splits == 1) return err;
  return launch_splitk_reduce(partials, splits, p.M, p.N, splitk_partials_ld(p.N), p.C, p.ldc,
                              p.epilogue, stream);
}

template cudaError_t launch_fma_gemm<FmaLarge>(const GemmProblem&, int, float*, cudaStream_t);
template cudaError_t launch_fma_gemm<FmaSmall>(const GemmProblem&, int, float*, cudaStream_t);

}  // namespace pygpukit
