// The portable TF32 tensor-core GEMM: mma.sync.m16n8k8 fed by a multi-stage
// cp.async pipeline (sm_80 and newer). One template serves every tile
// configuration (MmaSyncConfig), operand layout and load width; see
// docs/design.md for the fragment layouts and tiling.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/epilogue.cuh"
#include "cuda/launch_util.h"
#include "cuda/mma_sync/mma_sync_config.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tile_raster.cuh"

namespace pygpukit {
namespace mma_sync_detail {

// Threadblocks are rasterized in groups of this many tile rows (grouped_tile).
constexpr int64_t kGroupM = 8;

// One cp.async of 16 bytes (kVec16) or 4, src_bytes of them read, the rest
// zero-filled.
template <bool kVec16>
__device__ __forceinline__ void copy_async(float* dst, const float* src, int src_bytes) {
  if constexpr (kVec16) {
    ptx::cp_async_16(dst, src, src_bytes);
  } else {
    ptx::cp_async_4(dst, src, src_bytes);
  }
}

// The cp.async copies of one operand that one thread issues per stage,
// worked out once per output tile: copy i is row r0 + i * kRowStep of the
// stage tile at column c, so a k-tile moves a pointer along K and checks
// K's bound with one compare per copy (or one per thread), and M's or N's
// bound is fixed per tile. Elements outside the operand are zero-filled, so
// edge tiles need no other predication and the zero K tail adds nothing to
// the accumulators. Working out each copy's 64-bit address and both bounds
// per k-tile instead took ~8 of the ~12.5 instructions per MMA of the
// 128x256 tile's mainloop, with register spills (SASS, sm_90a).
//   K-major operand: tile rows are M (or N), columns K; element (mn, k) at
//     gmem[mn * ld + k]. MN-major: tile rows are K, columns M (or N);
//     element (k, mn) at gmem[k * ld + mn].
template <class Tile, int kThreads, bool kVec16, bool kKMajor>
struct StageLoader {
  static constexpr int kWidth = kVec16 ? 4 : 1;  // floats per cp.async
  static constexpr int kPerRow = Tile::kCols / kWidth;
  static constexpr int kCopies = Tile::kRows * kPerRow / kThreads;
  static constexpr int kRowStep = kThreads / kPerRow;  // tile rows between copies
  static constexpr int kBK = kKMajor ? Tile::kCols : Tile::kRows;  // the k-tile's depth
  static constexpr uint32_t kAllCopies = kCopies == 32 ? ~0u : (1u << kCopies) - 1;  // in_bounds, all inside
  static_assert(kThreads % kPerRow == 0 && kCopies * kThreads == Tile::kRows * kPerRow &&
                    kCopies <= 32,
                "each thread copies one column of the tile, kRowStep rows apart");

  const float* first;  // copy 0's source at k-tile 0
  uint32_t in_bounds;  // bit i: copy i lies inside M (or N)
  int mn_bytes;        // MN-major: bytes of a copy inside M (or N), which may end inside it
  int row0, col;       // copy 0's row and column in the tile (copy i: row0 + i * kRowStep)
  int smem_offset;     // copy 0's place in the stage, in floats

  __device__ __forceinline__ StageLoader(const float* gmem, int64_t ld, int64_t mn0,
                                         int64_t mn_extent, int tid) {
    const int r0 = tid / kPerRow, c = (tid % kPerRow) * kWidth;
    row0 = r0;
    col = c;
    smem_offset = Tile::offset(r0, c);
    in_bounds = 0;
    if constexpr (kKMajor) {
      first = gmem + (mn0 + r0) * ld + c;
      mn_bytes = 4 * kWidth;
#pragma unroll
      for (int i = 0; i < kCopies; ++i)
        if (mn0 + r0 + i * kRowStep < mn_extent) in_bounds |= 1u << i;
    } else {
      first = gmem + r0 * ld + mn0 + c;
      const int64_t left = mn_extent - (mn0 + c);
      mn_bytes = 4 * (left <= 0 ? 0 : left < kWidth ? int(left) : kWidth);
      if (mn_bytes > 0) in_bounds = kAllCopies;
    }
  }

  // This thread's copies as they sit in a stage, one 16- or 4-byte chunk each.
  using Chunk = typename std::conditional<kVec16, uint4, uint32_t>::type;
  // Where copies stay kSwizzleRows-aligned apart, a fixed step from copy 0.
  __device__ __forceinline__ Chunk* chunk(float* stage, int i) const {
    if constexpr (kRowStep % Tile::kSwizzleRows == 0)
      return reinterpret_cast<Chunk*>(stage + smem_offset + i * kRowStep * Tile::kCols);
    else
      return reinterpret_cast<Chunk*>(stage + Tile::offset(row0 + i * kRowStep, col));
  }
  __device__ __forceinline__ void fetch(float* stage, Chunk (&v)[kCopies]) const {
#pragma unroll
    for (int i = 0; i < kCopies; ++i) v[i] = *chunk(stage, i);
  }
  __device__ __forceinline__ void store_rounded(float* stage, Chunk (&v)[kCopies]) const {
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      if constexpr (kVec16) {
        v[i] = make_uint4(ptx::round_to_tf32(v[i].x), ptx::round_to_tf32(v[i].y),
                          ptx::round_to_tf32(v[i].z), ptx::round_to_tf32(v[i].w));
      } else {
        v[i] = ptx::round_to_tf32(v[i]);
      }
      *chunk(stage, i) = v[i];
    }
  }

  // Copy 0's source in the k-tile that starts at column (K-major) or row k0.
  __device__ __forceinline__ const float* source(int64_t k0, int64_t ld) const {
    return first + (kKMajor ? k0 : k0 * ld);
  }

  // Copies k-tile `k_tile`, which lies inside K, of a tile that lies inside
  // M (or N): no bound, zero-fill count or stand-in address, the copies'
  // sources one pointer stepped by kRowStep rows.
  __device__ __forceinline__ void load_inside(float* stage, int64_t ld, int k_tile) const {
    static_assert(kVec16, "only the 16-byte path has an interior loop (see the kernel)");
    const float* src = source(int64_t(k_tile) * kBK, ld);
    const int64_t step = kRowStep * ld;
#pragma unroll
    for (int i = 0; i < kCopies; ++i, src += step) ptx::cp_async_16(chunk(stage, i), src);
  }

  // Copies k-tile `k_tile` of an operand with K columns (K-major) or rows
  // into `stage`, zero-filling what lies outside the operand. gmem, the
  // operand's base, is the address of copies that read nothing: cp.async
  // wants a legal one even then.
  __device__ __forceinline__ void load(float* stage, const float* gmem, int64_t ld, int64_t K,
                                       int64_t k_tile) const {
    const int64_t k0 = k_tile * kBK;
    const float* src = source(k0, ld);
    int k_bytes = mn_bytes;  // K-major: this thread's column against K, the same for every copy
    if constexpr (kKMajor) {
      const int64_t left = K - (k0 + col);
      k_bytes = left >= kWidth ? 4 * kWidth : left > 0 ? 4 * int(left) : 0;
    }
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const bool in = ((in_bounds >> i) & 1u) &&
                      (kKMajor ? k_bytes > 0 : k0 + row0 + i * kRowStep < K);
      copy_async<kVec16>(reinterpret_cast<float*>(chunk(stage, i)),
                         in ? src + i * kRowStep * ld : gmem, in ? k_bytes : 0);
    }
  }
};

// Rounds to TF32, in place, the elements of a stage that this thread copied
// for both operands (before sm_90: see kRoundFragments). Called after the
// thread's own cp.async groups completed and before the barrier that
// publishes the stage, so each element is
// rounded once per threadblock instead of once per warp that reads it, and
// the MMA loop only loads and multiplies. All loads are issued before the
// first store: in load-round-store order per chunk the compiler cannot move
// a load above the previous chunk's store (it cannot prove they do not
// alias), and each chunk waited out a shared-memory round trip.
// Zero-filled elements become 0x1000, which the tensor core reads as +0 (it
// ignores the 13 low bits).
template <class LoaderA, class LoaderB>
__device__ __forceinline__ void round_stage_in_place(const LoaderA& la, float* sa,
                                                     const LoaderB& lb, float* sb) {
  typename LoaderA::Chunk a[LoaderA::kCopies];
  typename LoaderB::Chunk b[LoaderB::kCopies];
  la.fetch(sa, a);
  lb.fetch(sb, b);
  la.store_rounded(sa, a);
  lb.store_rounded(sb, b);
}

// Offset, in floats, of the fragment element of an MN-major stage (Tile) at
// row kk + t and column warp0 + base + c: warp0 a multiple of 32 (a warp
// tile's first column), base a compile-time multiple of 16 with c < 16 (or
// of 8 with c < 8), and `lane_chunk` the lane's ((c / 4) ^ 2t) * 4 + c % 4.
// Written so that only the chunk bits within a 32-column group are XORed at
// run time: chunk (warp0 + base + c) / 4, its low 3 bits XOR 2t, is
// warp0 / 4 + (base & ~31) / 4 + ((base % 32) / 4 ^ c / 4 ^ 2t), as
// (base % 32) / 4 and c / 4 share no bits.
template <class Tile>
__device__ __forceinline__ int mn_major_offset(int kk, int warp0, int base, int lane_chunk) {
  const int t = (threadIdx.x % 32) % 4;
  return (kk + t) * Tile::kCols + warp0 + (base & ~31) + (((base % 32) / 4) * 4 ^ lane_chunk);
}

// Where the operands are rounded to TF32 for the tensor core, which drops
// the low 13 bits. From sm_90 on, in registers as each warp loads its
// fragments: cvt.rn is one instruction there (ptx::round_fragment_to_tf32),
// and on 64x32 warp tiles 1.5 registers per MMA; rounding each stage once in
// shared memory instead costs a load and a store of the whole stage per
// k-tile. H100, 2026-12-07, MmaSyncLarge forced, in-register against the
// shared-memory pass in one run: 4096^3 tn 139.4 -> 146.2 TFLOP/s, nn
// 145.2 -> 157.1; 8192^3 tn 145.6 -> 154.3, nn 145.4 -> 159.8; 8192 x 14336
// x 4096 tn 133.0 -> 147.0, nn 145.8 -> 149.3. Before sm_90 the rounding
// is two instructions (FSETP + predicated IADD) and the pass wins: sm_80
// code (compute_80 PTX) on the same H100 with 64x64 warp tiles lost 15% to
// rounding in registers.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr bool kRoundFragments = false;
#else
constexpr bool kRoundFragments = true;
#endif

// The epilogue of one warp: its WM x WN accumulators (m16n8 fragments, of
// C or, swapped, of C^T) are staged in shared memory at `staging`, then leave as rows of
// bias + activation applied 16-byte stores, two 256-byte rows per warp
// instruction on 64-column warp tiles. A rolled loop over the staged rows
// keeps the code short: with a store per accumulator pair, bias and
// activation inlined at each, MmaSyncLarge's kernel was ~34000 SASS
// instructions, most of them epilogue, whose cost per output tile showed in
// K: 75, 147 and 189 TFLOP/s at 8192 x 8192 x K for K = 1024, 4096 and
// 14336, against 194, 209 and 208 staged (H100, forced, B column-major).
template <class Cfg, bool kAKMajor, bool kBKMajor, class Acc>
__device__ __forceinline__ void store_warp_tile(const Acc& result, float* staging,
                                                const GemmProblem& p, int64_t batch, int64_t row0,
                                                int64_t col0) {
  using Staging = WarpStagingTile<Cfg, kAKMajor, kBKMajor>;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  if constexpr (Staging::kSwapAB) {
    // The warp's tile of C^T: tile (i, j) holds C^T rows 16i + 2g + h (mma
    // row g + 8h, see the P fragments) and columns 8j + 2t, 8j + 2t + 1, so
    // a lane holds a 2 x 2 block of C: rows 8j + 2t (+1), columns 16i + 2g (+1).
#pragma unroll
    for (int i = 0; i < Cfg::WN / 16; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::WM / 8; ++j) {
        float* at = staging + (j * 8 + 2 * t) * Staging::kStride + i * 16 + 2 * g;
        *reinterpret_cast<float2*>(at) = make_float2(result[i][j][0], result[i][j][2]);
        *reinterpret_cast<float2*>(at + Staging::kStride) =
            make_float2(result[i][j][1], result[i][j][3]);
      }
  } else {
#pragma unroll
    for (int i = 0; i < Cfg::kMmaM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // Column-major A: mma row g + 8h of an m16 tile is tile row 2g + h.
        float* row = staging + (i * 16 + (kAKMajor ? g + 8 * h : 2 * g + h)) * Staging::kStride;
#pragma unroll
        for (int j = 0; j < Cfg::kMmaN; ++j)
          *reinterpret_cast<float2*>(row + j * 8 + 2 * t) =
              make_float2(result[i][j][2 * h], result[i][j][2 * h + 1]);
      }
  }
  __syncwarp();

  // Lane l stores columns 4 * (l % kLanesPerRow) + 0..3 of every
  // kRowsPerStep-th row from row l / kLanesPerRow on.
  constexpr int kLanesPerRow = Cfg::WN / 4;
  constexpr int kRowsPerStep = 32 / kLanesPerRow;
  static_assert(Cfg::WN % 4 == 0 && 32 % kLanesPerRow == 0 && Cfg::WM % kRowsPerStep == 0,
                "whole rows of 16-byte chunks per warp instruction");
  const int64_t col = col0 + 4 * (lane % kLanesPerRow);
  const float* src = staging + (lane / kLanesPerRow) * Staging::kStride + 4 * (lane % kLanesPerRow);
  float* C = p.C + batch * p.batch_stride_c;
  const bool vec = p.ldc % 4 == 0 && reinterpret_cast<uintptr_t>(C) % 16 == 0 && col + 3 < p.N;
  // No bias adds nothing, not +0.0f (which would turn -0 into +0).
  const bool has_bias = p.epilogue.bias != nullptr;
  float bias[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (has_bias)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (col + e < p.N) bias[e] = p.epilogue.bias[col + e];
  with_activation(p.epilogue.activation, [&](auto act) {
#pragma unroll 4
    for (int r = lane / kLanesPerRow; r < Cfg::WM;
         r += kRowsPerStep, src += kRowsPerStep * Staging::kStride) {
      const int64_t row = row0 + r;
      if (row >= p.M) break;
      const float4 v = *reinterpret_cast<const float4*>(src);
      float out[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        out[e] = apply_activation(has_bias ? out[e] + bias[e] : out[e], act);
      float* dst = C + row * p.ldc + col;
      if (vec) {
        ptx::store_global_v4(dst, out[0], out[1], out[2], out[3]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (col + e < p.N) dst[e] = out[e];
      }
    }
  });
}

// The 4-byte variants keep one block as the minimum: under MmaSyncSmall's
// bound of three they spill 44-320 bytes (sm_90a), which the 16-byte ones do
// not.
template <class Cfg, Layout kLayoutA, Layout kLayoutB, bool kVec16>
__global__ void __launch_bounds__(Cfg::kThreads, kVec16 ? Cfg::kMinBlocksPerSM : 1)
    mma_sync_gemm_kernel(const GemmProblem p) {
  constexpr bool kAKMajor = kLayoutA == Layout::kRowMajor;
  constexpr bool kBKMajor = kLayoutB == Layout::kColMajor;
  using TileA = SmemTile<Cfg::BM, Cfg::BK, kAKMajor>;
  using TileB = SmemTile<Cfg::BN, Cfg::BK, kBKMajor>;
  // The operands in the MMA's roles: P gives its A fragments (m16 tiles), Q
  // its B fragments (n8 tiles). Row-major A and B (a @ b) run swapped, the
  // warp computing its tile of C transposed, C^T = B^T A^T: B, MN-major,
  // then loads as P with 8-byte pairs straight into the MMA's register
  // quads, and A as Q with ldmatrix, where B as Q took scalar loads (two
  // per fragment) or, paired, ~165 register moves per k-tile (MmaSyncLarge,
  // sm_90a) to regroup pairs.
  constexpr bool kSwapAB = mma_sync_swaps_ab(kAKMajor, kBKMajor);
  using TileP = typename std::conditional<kSwapAB, TileB, TileA>::type;
  using TileQ = typename std::conditional<kSwapAB, TileA, TileB>::type;
  constexpr bool kPKMajor = kSwapAB ? kBKMajor : kAKMajor;
  constexpr bool kQKMajor = kSwapAB ? kAKMajor : kBKMajor;
  constexpr int PI = (kSwapAB ? Cfg::WN : Cfg::WM) / 16;  // m16 tiles per warp
  constexpr int QI = (kSwapAB ? Cfg::WM : Cfg::WN) / 8;   // n8 tiles per warp
  static_assert(kPKMajor || (kSwapAB ? Cfg::WN : Cfg::WM) % 32 == 0,
                "MN-major fragments need warp tiles of whole 32-column groups (mn_major_offset)");

  extern __shared__ __align__(128) float smem[];  // 128: the swizzle's lines (SmemTile)
  float* const smem_a = smem;
  float* const smem_b = smem + Cfg::kStages * TileA::kFloats;

  const int tid = threadIdx.x;
  const int lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;  // fragment row group / thread in group
  const int warp_m0 = (warp / Cfg::kWarpsN) * Cfg::WM;
  const int warp_n0 = (warp % Cfg::kWarpsN) * Cfg::WN;
  const int warp_p0 = kSwapAB ? warp_n0 : warp_m0, warp_q0 = kSwapAB ? warp_m0 : warp_n0;

  // Grouped rasterization of blockIdx.x over the output tiles.
  const int64_t tiles_m = ceil_div(p.M, Cfg::BM), tiles_n = ceil_div(p.N, Cfg::BN);
  const TileCoord tile = grouped_tile<kGroupM>(blockIdx.x, tiles_m, tiles_n);
  const int64_t m0 = tile.m * Cfg::BM, n0 = tile.n * Cfg::BN;
  const int64_t k_tiles = ceil_div(p.K, Cfg::BK);

  // gridDim.y is capped at 65535; larger batches loop.
  for (int64_t batch = blockIdx.y; batch < p.batch; batch += gridDim.y) {
    const float* A = p.A + batch * p.batch_stride_a;
    const float* B = p.B + batch * p.batch_stride_b;

    const StageLoader<TileA, Cfg::kThreads, kVec16, kAKMajor> loader_a(A, p.lda, m0, p.M, tid);
    const StageLoader<TileB, Cfg::kThreads, kVec16, kBKMajor> loader_b(B, p.ldb, n0, p.N, tid);
    auto load_stage = [&](int64_t k_tile, int stage) {
      loader_a.load(smem_a + stage * TileA::kFloats, A, p.lda, p.K, k_tile);
      loader_b.load(smem_b + stage * TileB::kFloats, B, p.ldb, p.K, k_tile);
    };

    float acc[PI][QI][4];
    float total[PI][QI][4];  // the promoted sums (kPromoteKTiles > 0 only)
#pragma unroll
    for (int i = 0; i < PI; ++i)
#pragma unroll
      for (int j = 0; j < QI; ++j)
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

    // Stage kt % kStages is read and (kt + kStages - 1) % kStages written:
    // counters stepped each k-tile rather than a 64-bit remainder each.
    int stage = 0, next_stage = Cfg::kStages - 1;

    // An MN-major stage's fragment loads read row kk + t (kk a multiple of
    // 8, so swizzle 2t) at column base + c, c < 16 for this lane: 8-byte
    // pairs at c = 2g, scalars at c = g. Their chunk index within the 16
    // columns, XOR the swizzle, and their place in the chunk are the same for
    // every load of the thread (pair_chunk, scalar_chunk: (chunk ^ 2t) * 4 +
    // c % 4).
    const int pair_chunk = ((g / 2) ^ (2 * t)) * 4 + (2 * g) % 4;
    const int scalar_chunk = ((g / 4) ^ (2 * t)) * 4 + g % 4;
    (void)pair_chunk;
    (void)scalar_chunk;

    // The fragments of one k8 step of the stages at sa / sb, as the MMAs
    // read them (unrounded): P's m16 tiles (the MMA's A operand) and Q's n8
    // tiles (its B operand).
    auto load_fragments = [&](const float* sa, const float* sb, int kk, uint32_t (&pf)[PI][4],
                              uint32_t (&qf)[QI][2]) {
      const float* const sp = kSwapAB ? sb : sa;
      const float* const sq = kSwapAB ? sa : sb;
#pragma unroll
      for (int i = 0; i < PI; ++i) {
        if constexpr (kPKMajor) {
          // Blocks: rows 0-7 / 8-15 at k 0-3, then the same at k 4-7; row
          // r + lane % 16 has swizzle lane % 8 (r is a multiple of 16).
          ptx::ldmatrix_x4(pf[i], sp + (warp_p0 + i * 16 + lane % 16) * TileP::kCols +
                                     ((kk / 4 + lane / 16) ^ (lane % 8)) * 4);
        } else {
          // MN-major P (a column-major A, or B when swapped): mma row g + 8h
          // of each m16 tile is fed from tile column 2g + h rather than
          // g + 8h (the epilogue puts the rows back), so a fragment's two
          // rows are adjacent: one 8-byte load per k fills half a fragment,
          // pf[i][0..1] at k = t and pf[i][2..3] at k = t + 4, 2 load
          // instructions instead of 4, into the register quad the MMA reads.
          const float* pair = sp + mn_major_offset<TileP>(kk, warp_p0, i * 16, pair_chunk);
          const float2 lo = *reinterpret_cast<const float2*>(pair);
          const float2 hi = *reinterpret_cast<const float2*>(pair + 4 * TileP::kCols);
          pf[i][0] = __float_as_uint(lo.x);
          pf[i][1] = __float_as_uint(lo.y);
          pf[i][2] = __float_as_uint(hi.x);
          pf[i][3] = __float_as_uint(hi.y);
        }
      }
#pragma unroll
      for (int j = 0; j < QI; ++j) {
        if constexpr (kQKMajor) {
          // One ldmatrix.x4 gives the fragments of two n8 tiles:
          // blocks (n 0-7, k 0-3), (n 0-7, k 4-7), (n 8-15, k 0-3), (n 8-15, k 4-7).
          if (j % 2 == 0) {
            uint32_t r[4];
            ptx::ldmatrix_x4(r, sq + (warp_q0 + j * 8 + (lane / 16) * 8 + lane % 8) * TileQ::kCols +
                                    ((kk / 4 + (lane / 8) % 2) ^ (lane % 8)) * 4);
            qf[j][0] = r[0];
            qf[j][1] = r[1];
            qf[j + 1][0] = r[2];
            qf[j + 1][1] = r[3];
          }
        } else {
          // MN-major Q (a row-major B behind a column-major A): scalar
          // loads, mma column g of tile j at column warp_q0 + 8j + g; a
          // fragment's two values lie at k = t and t + 4, which no load joins.
          const float* row = sq + mn_major_offset<TileQ>(kk, warp_q0, j * 8, scalar_chunk);
          qf[j][0] = __float_as_uint(row[0]);
          qf[j][1] = __float_as_uint(row[4 * TileQ::kCols]);
        }
      }
    };
    // Waits for the stage in slot `slot` (this thread's copies), rounds it in
    // shared memory where the fragments are not rounded in registers, and
    // makes it visible to all warps; the barrier also guarantees that every
    // warp has loaded its last fragments of the previous stage, whose slot
    // the next copies overwrite.
    auto publish = [&](int slot) {
      ptx::cp_async_wait<Cfg::kStages - 2>();
      if constexpr (!kRoundFragments)
        round_stage_in_place(loader_a, smem_a + slot * TileA::kFloats, loader_b,
                             smem_b + slot * TileB::kFloats);
      __syncthreads();
    };

    // Fragments in two register sets: those of k8 step s + 1 (or of the next
    // k-tile's step 0) are loaded before step s's MMAs are issued, so that
    // their shared-memory latency overlaps MMAs rather than stalling the
    // warp at the top of each k-tile, where the loads could only start
    // after the barrier. The next k-tile is published (wait + barrier)
    // during the last step, CUTLASS's multistage order.
    uint32_t frag_p[2][PI][4], frag_q[2][QI][2];
    publish(0);
    load_fragments(smem_a, smem_b, 0, frag_p[0], frag_q[0]);

    // One k-tile: multiply stage kt, issue the copies of k-tile kt +
    // kStages - 1, unpredicated where `inside` (std::true_type) says that
    // k-tile and the whole tile lie inside the operands, and publish stage
    // kt + 1. A tag rather than a loader lambda: passing a closure that
    // refers to the counters raised MmaSyncSmall's registers from 168 to
    // 209 (sm_90a, 4-byte copies), one block per SM fewer.
    auto k_tile_step = [&](auto kt, auto inside) {
      constexpr int kSteps = Cfg::BK / 8;
      static_assert(kSteps % 2 == 0, "each k-tile must start on fragment set 0");
      const float* const sa = smem_a + stage * TileA::kFloats;
      const float* const sb = smem_b + stage * TileB::kFloats;
#pragma unroll
      for (int step = 0; step < kSteps; ++step) {
        // The next stage's copies, before this step's fragment loads and
        // MMAs so that their address arithmetic overlaps the MMAs in flight
        // (interior k-tiles after step Cfg::kInsideCopyStep,
        // mma_sync_config.h), and always before the last step's publish,
        // whose wait counts this k-tile's group as issued.
        if (step == (decltype(inside)::value ? Cfg::kInsideCopyStep : 0)) {
          const auto next = kt + Cfg::kStages - 1;
          if constexpr (decltype(inside)::value) {
            loader_a.load_inside(smem_a + next_stage * TileA::kFloats, p.lda, next);
            loader_b.load_inside(smem_b + next_stage * TileB::kFloats, p.ldb, next);
          } else if (next < k_tiles) {
            load_stage(next, next_stage);
          }
          ptx::cp_async_commit();
        }
        const int cur = step % 2;
        if (step + 1 < kSteps) {
          load_fragments(sa, sb, 8 * (step + 1), frag_p[cur ^ 1], frag_q[cur ^ 1]);
        } else {
          // After the last k-tile this publishes a slot nothing was copied
          // into and loads fragments nobody uses: harmless, and no branch.
          const int following = stage + 1 == Cfg::kStages ? 0 : stage + 1;
          publish(following);
          load_fragments(smem_a + following * TileA::kFloats, smem_b + following * TileB::kFloats,
                         0, frag_p[cur ^ 1], frag_q[cur ^ 1]);
        }
        uint32_t (&fp)[PI][4] = frag_p[cur];
        uint32_t (&fq)[QI][2] = frag_q[cur];
        if constexpr (kRoundFragments) {
#pragma unroll
          for (int i = 0; i < PI; ++i)
#pragma unroll
            for (int r = 0; r < 4; ++r) fp[i][r] = ptx::round_fragment_to_tf32(fp[i][r]);
#pragma unroll
          for (int j = 0; j < QI; ++j)
#pragma unroll
            for (int r = 0; r < 2; ++r) fq[j][r] = ptx::round_fragment_to_tf32(fq[j][r]);
        }
#pragma unroll
        for (int i = 0; i < PI; ++i)
#pragma unroll
          for (int j = 0; j < QI; ++j) ptx::mma_m16n8k8_tf32(acc[i][j], fp[i], fq[j]);
      }
      if constexpr (Cfg::kPromoteKTiles > 0) {
        if ((kt + 1) % Cfg::kPromoteKTiles == 0 || kt + 1 == k_tiles) {
#pragma unroll
          for (int i = 0; i < PI; ++i)
#pragma unroll
            for (int j = 0; j < QI; ++j)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                total[i][j][e] += acc[i][j][e];
                acc[i][j][e] = 0.0f;
              }
        }
      }
      stage = stage + 1 == Cfg::kStages ? 0 : stage + 1;
      next_stage = next_stage + 1 == Cfg::kStages ? 0 : next_stage + 1;
    };

    // The k-tiles whose next copies all lie inside the operands run a loop
    // of their own with load_inside and 32-bit counters. With the
    // predicated loader in the same loop (even behind a branch to an
    // unpredicated path), ptxas kept A's fragments in one register quad, so
    // each group of four MMAs waited on the ldmatrix issued right before it;
    // without it the hot loop is 222 instead of 380 static instructions per
    // k-tile (MmaSyncLarge, nt; nn 240 against 454, tn 288 / 445, tt 269 /
    // 411, and tn 256 / tt 237 since column-major A's 8-byte loads; the
    // other tiles alike), with the fragment loads several MMAs
    // ahead and no spill reloads (SASS, sm_90a). H200, forced, against the
    // single loop in alternate processes: nt +4% (4096^3) to +7% (8192^3),
    // nn within 1%, 2048^3 nn (MmaSyncMedium) +5%. MmaSyncSmall's 16-byte
    // variants then took 168-180 registers instead of 140-150, hence their
    // launch bound of three blocks per SM; at 1024 x 1024 x 4096 (nt, 256
    // tiles: two per SM would do) they still run ~5% below the single loop
    // (cause not found; see the design doc).
    //
    // Only with 16-byte copies: on the 4-byte path (4x the copies) an
    // unpredicated path raised MmaSyncSmall's registers from 168 to 208, one
    // block per SM fewer.
    //
    // Which loop a k-tile takes must be the same for the whole threadblock
    // (both loops hold __syncthreads, ldmatrix and mma.sync, which need
    // whole warps): it follows from the tile's place, not from a thread's
    // own copies (with that, threads of one warp split between the loops
    // on edge tiles and the block hung).
    int kt_inside = 0;
    if constexpr (kVec16) {
      int inside_steps = 0;
      if (m0 + Cfg::BM <= p.M && n0 + Cfg::BN <= p.N && p.K / Cfg::BK <= INT32_MAX)
        inside_steps = int(p.K / Cfg::BK) - (Cfg::kStages - 1);
      for (; kt_inside < inside_steps; ++kt_inside) k_tile_step(kt_inside, std::true_type{});
    }
    for (int64_t kt = kt_inside; kt < k_tiles; ++kt) k_tile_step(kt, std::false_type{});
    ptx::cp_async_wait<0>();
    // Every warp is done with the stages, which the epilogue reuses.
    __syncthreads();
    const auto& result = Cfg::kPromoteKTiles > 0 ? total : acc;
    using Staging = WarpStagingTile<Cfg, kAKMajor, kBKMajor>;
    store_warp_tile<Cfg, kAKMajor, kBKMajor>(result, smem + warp * Staging::kFloats, p, batch,
                                             m0 + warp_m0, n0 + warp_n0);
  }
}

}  // namespace mma_sync_detail

template <class Config, Layout kLayoutA, Layout kLayoutB, bool kVec16>
cudaError_t launch_mma_sync_gemm(const GemmProblem& p, cudaStream_t stream) {
  constexpr int kSmem = mma_sync_smem_bytes<Config>(kLayoutA, kLayoutB);
  constexpr auto kernel = mma_sync_detail::mma_sync_gemm_kernel<Config, kLayoutA, kLayoutB, kVec16>;
  KernelReady ready;
  const cudaError_t err = prepare_kernel<kernel>(KernelNeeds{kSmem}, &ready);
  if (err != cudaSuccess) return step_result(err, "setting the kernel up");
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
  PYGPUKIT_INSTANTIATE_MMA_SYNC_CONFIG(MmaSyncSmall, LA, LB)                                   \
  PYGPUKIT_INSTANTIATE_MMA_SYNC_CONFIG(MmaSyncCompact, LA, LB)

}  // namespace pygpukit
