// The portable TF32 tensor-core GEMM: mma.sync.m16n8k8 fed by a multi-stage
// cp.async pipeline (sm_80 and newer). One template serves every tile
// configuration (MmaSyncConfig), operand layout and load width; see
// docs/tf32_tensorcore_design.md for the fragment layouts and tiling.
#pragma once

#include <atomic>
#include <cstdint>

#include "epilogue.cuh"
#include "launch_util.h"
#include "mma_sync_config.h"
#include "ptx.cuh"
#include "tile_raster.cuh"

namespace pygpukit {
namespace mma_sync_detail {

// Threadblocks are rasterized in groups of this many tile rows (grouped_tile).
constexpr int64_t kGroupM = 8;

// Copies the kRows x kCols block at (row0, col0) of a matrix whose element
// (r, c) lives at gmem[r * ld + c] into one stage of shared memory. Elements
// with r >= rows or c >= cols are zero-filled, so edge tiles need no other
// predication and the zero K tail adds nothing to the accumulators.
template <class Tile, int kThreads, bool kVec16>
__device__ __forceinline__ void load_tile_async(float* smem, const float* gmem,
                                                int64_t ld, int64_t row0,
                                                int64_t col0, int64_t rows,
                                                int64_t cols, int tid) {
  constexpr int kWidth = kVec16 ? 4 : 1;  // floats per cp.async
  constexpr int kPerRow = Tile::kCols / kWidth;
  constexpr int kCopies = Tile::kRows * kPerRow;
  static_assert(kCopies % kThreads == 0, "tile copies must divide evenly among threads");
#pragma unroll
  for (int i = 0; i < kCopies / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    const int r = idx / kPerRow;
    const int c = (idx % kPerRow) * kWidth;
    const int64_t gr = row0 + r, gc = col0 + c;
    const int64_t left = cols - gc;  // elements of this row still in bounds
    const int valid = (gr < rows && left > 0) ? (left < kWidth ? int(left) : kWidth) : 0;
    // With nothing to read, point at the (valid, aligned) base: cp.async
    // still wants a legal address even when src-size is 0.
    const float* src = valid ? gmem + gr * ld + gc : gmem;
    float* dst = smem + r * Tile::kStride + c;
    if constexpr (kVec16) {
      ptx::cp_async_16(dst, src, valid * 4);
    } else {
      ptx::cp_async_4(dst, src, valid * 4);
    }
  }
}

// Rounds to TF32, in place, the elements of one stage that this thread
// copied with load_tile_async (same index walk). Called after the thread's
// own cp.async group completed and before the barrier that publishes the
// stage, so each element is rounded once per threadblock instead of once
// per warp that reads it, and the MMA loop only loads and multiplies.
// Zero-filled elements become 0x1000, which the tensor core reads as +0
// (it ignores the 13 low bits).
template <class Tile, int kThreads, bool kVec16>
__device__ __forceinline__ void round_tile_in_place(float* smem, int tid) {
  constexpr int kWidth = kVec16 ? 4 : 1;
  constexpr int kPerRow = Tile::kCols / kWidth;
  constexpr int kCopies = Tile::kRows * kPerRow;
#pragma unroll
  for (int i = 0; i < kCopies / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    uint32_t* p = reinterpret_cast<uint32_t*>(smem + (idx / kPerRow) * Tile::kStride +
                                              (idx % kPerRow) * kWidth);
    if constexpr (kVec16) {
      uint4 v = *reinterpret_cast<uint4*>(p);
      v.x = ptx::round_to_tf32(v.x);
      v.y = ptx::round_to_tf32(v.y);
      v.z = ptx::round_to_tf32(v.z);
      v.w = ptx::round_to_tf32(v.w);
      *reinterpret_cast<uint4*>(p) = v;
    } else {
      *p = ptx::round_to_tf32(*p);
    }
  }
}

template <class Cfg, Layout kLayoutA, Layout kLayoutB, bool kVec16>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    mma_sync_gemm_kernel(const GemmProblem p) {
  constexpr bool kAKMajor = kLayoutA == Layout::kRowMajor;
  constexpr bool kBKMajor = kLayoutB == Layout::kColMajor;
  using TileA = SmemTile<Cfg::BM, Cfg::BK, kAKMajor>;
  using TileB = SmemTile<Cfg::BN, Cfg::BK, kBKMajor>;
  constexpr int MI = Cfg::kMmaM, NI = Cfg::kMmaN;

  extern __shared__ __align__(16) float smem[];
  float* const smem_a = smem;
  float* const smem_b = smem + Cfg::kStages * TileA::kFloats;

  const int tid = threadIdx.x;
  const int lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;  // fragment row group / thread in group
  const int warp_m0 = (warp / Cfg::kWarpsN) * Cfg::WM;
  const int warp_n0 = (warp % Cfg::kWarpsN) * Cfg::WN;

  // Grouped rasterization of blockIdx.x over the output tiles.
  const int64_t tiles_m = ceil_div(p.M, Cfg::BM), tiles_n = ceil_div(p.N, Cfg::BN);
  const TileCoord tile = grouped_tile<kGroupM>(blockIdx.x, tiles_m, tiles_n);
  const int64_t m0 = tile.m * Cfg::BM, n0 = tile.n * Cfg::BN;
  const int64_t k_tiles = ceil_div(p.K, Cfg::BK);

  // gridDim.y is capped at 65535; larger batches loop.
  for (int64_t batch = blockIdx.y; batch < p.batch; batch += gridDim.y) {
    const float* A = p.A + batch * p.batch_stride_a;
    const float* B = p.B + batch * p.batch_stride_b;

    auto load_stage = [&](int64_t k_tile, int stage) {
      const int64_t k0 = k_tile * Cfg::BK;
      float* sa = smem_a + stage * TileA::kFloats;
      float* sb = smem_b + stage * TileB::kFloats;
      if constexpr (kAKMajor) {  // A(m, k) at m * lda + k
        load_tile_async<TileA, Cfg::kThreads, kVec16>(sa, A, p.lda, m0, k0, p.M, p.K, tid);
      } else {  // A(m, k) at k * lda + m
        load_tile_async<TileA, Cfg::kThreads, kVec16>(sa, A, p.lda, k0, m0, p.K, p.M, tid);
      }
      if constexpr (kBKMajor) {  // B(k, n) at n * ldb + k
        load_tile_async<TileB, Cfg::kThreads, kVec16>(sb, B, p.ldb, n0, k0, p.N, p.K, tid);
      } else {  // B(k, n) at k * ldb + n
        load_tile_async<TileB, Cfg::kThreads, kVec16>(sb, B, p.ldb, k0, n0, p.K, p.N, tid);
      }
    };

    float acc[MI][NI][4];
    float total[MI][NI][4];  // the promoted sums (kPromoteKTiles > 0 only)
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = total[i][j][e] = 0.0f;

    // The previous batch iteration may still be reading the stages.
    __syncthreads();

    // Prologue: fill kStages - 1 stages. Every stage commits a group, empty
    // or not, so that wait_group<kStages - 2> always means "stage kt landed".
#pragma unroll
    for (int s = 0; s < Cfg::kStages - 1; ++s) {
      if (s < k_tiles) load_stage(s, s);
      ptx::cp_async_commit();
    }

    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      ptx::cp_async_wait<Cfg::kStages - 2>();
      const int stage = int(kt % Cfg::kStages);
      float* const sa = smem_a + stage * TileA::kFloats;
      float* const sb = smem_b + stage * TileB::kFloats;
      round_tile_in_place<TileA, Cfg::kThreads, kVec16>(sa, tid);
      round_tile_in_place<TileB, Cfg::kThreads, kVec16>(sb, tid);
      // Makes stage kt (rounded) visible to all warps, and guarantees that
      // every warp finished reading stage kt - 1, which the next load
      // overwrites.
      __syncthreads();
      const int64_t next = kt + Cfg::kStages - 1;
      if (next < k_tiles) load_stage(next, int(next % Cfg::kStages));
      ptx::cp_async_commit();

#pragma unroll
      for (int kk = 0; kk < Cfg::BK; kk += 8) {
        uint32_t a[MI][4], b[NI][2];
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          const int m = warp_m0 + i * 16;
          if constexpr (kAKMajor) {
            // Blocks: rows 0-7 / 8-15 at k 0-3, then the same at k 4-7.
            ptx::ldmatrix_x4(a[i], sa + (m + lane % 16) * TileA::kStride + kk + (lane / 16) * 4);
          } else {
            const float* col = sa + (kk + t) * TileA::kStride + m + g;
            a[i][0] = __float_as_uint(col[0]);
            a[i][1] = __float_as_uint(col[8]);
            a[i][2] = __float_as_uint(col[4 * TileA::kStride]);
            a[i][3] = __float_as_uint(col[4 * TileA::kStride + 8]);
          }
        }
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          const int n = warp_n0 + j * 8;
          if constexpr (kBKMajor) {
            // One ldmatrix.x4 gives the fragments of two n8 tiles:
            // blocks (n 0-7, k 0-3), (n 0-7, k 4-7), (n 8-15, k 0-3), (n 8-15, k 4-7).
            if (j % 2 == 0) {
              uint32_t r[4];
              ptx::ldmatrix_x4(r, sb + (n + (lane / 16) * 8 + lane % 8) * TileB::kStride + kk +
                                      ((lane / 8) % 2) * 4);
              b[j][0] = r[0];
              b[j][1] = r[1];
              b[j + 1][0] = r[2];
              b[j + 1][1] = r[3];
            }
          } else {
            const float* row = sb + (kk + t) * TileB::kStride + n + g;
            b[j][0] = __float_as_uint(row[0]);
            b[j][1] = __float_as_uint(row[4 * TileB::kStride]);
          }
        }
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int j = 0; j < NI; ++j) ptx::mma_m16n8k8_tf32(acc[i][j], a[i], b[j]);
      }
      if constexpr (Cfg::kPromoteKTiles > 0) {
        if ((kt + 1) % Cfg::kPromoteKTiles == 0 || kt + 1 == k_tiles) {
#pragma unroll
          for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                total[i][j][e] += acc[i][j][e];
                acc[i][j][e] = 0.0f;
              }
        }
      }
    }
    ptx::cp_async_wait<0>();
    const auto& result = Cfg::kPromoteKTiles > 0 ? total : acc;

    // Epilogue: each thread owns pairs (row, col..col+1) of C.
    float* C = p.C + batch * p.batch_stride_c;
    const bool pair_stores = pair_stores_aligned(C, p.ldc);
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        const int64_t col = n0 + warp_n0 + j * 8 + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = m0 + warp_m0 + i * 16 + g + 8 * h;
          store_pair(p.epilogue, C, p.ldc, p.M, p.N, row, col, result[i][j][2 * h],
                     result[i][j][2 * h + 1], pair_stores);
        }
      }
    }
  }
}

}  // namespace mma_sync_detail

template <class Config, Layout kLayoutA, Layout kLayoutB, bool kVec16>
cudaError_t launch_mma_sync_gemm(const GemmProblem& p, cudaStream_t stream) {
  constexpr int kSmem = mma_sync_smem_bytes<Config>(kLayoutA, kLayoutB);
  auto kernel = mma_sync_detail::mma_sync_gemm_kernel<Config, kLayoutA, kLayoutB, kVec16>;
  static std::atomic<uint64_t> smem_configured{0};  // one per instantiation
  cudaError_t err =
      allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmem, smem_configured);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(Config::tiles(p.M, p.N)),
                  static_cast<unsigned>(p.batch < 65535 ? p.batch : 65535));
  kernel<<<grid, Config::kThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

// Explicit instantiations of every configuration and load width the
// dispatcher uses (MmaSyncLarge: 16-byte loads only) for one operand layout
// pair; each mma_sync_gemm_<a><b>.cu holds one of these, so the four layouts
// compile in parallel.
#define PYGPUKIT_INSTANTIATE_MMA_SYNC_CONFIG(CFG, LA, LB)                                   \
  template cudaError_t launch_mma_sync_gemm<CFG, LA, LB, true>(const GemmProblem&, cudaStream_t); \
  template cudaError_t launch_mma_sync_gemm<CFG, LA, LB, false>(const GemmProblem&, cudaStream_t);
#define PYGPUKIT_INSTANTIATE_MMA_SYNC(LA, LB)                                                 \
  template cudaError_t launch_mma_sync_gemm<MmaSyncLarge, LA, LB, true>(const GemmProblem&,  \
                                                                        cudaStream_t);       \
  PYGPUKIT_INSTANTIATE_MMA_SYNC_CONFIG(MmaSyncMedium, LA, LB) \
  PYGPUKIT_INSTANTIATE_MMA_SYNC_CONFIG(MmaSyncSmall, LA, LB)

}  // namespace pygpukit
