// The Hopper TF32 GEMM: TMA copies into 128-byte-swizzled shared memory,
// warp-specialized into one producer warpgroup (TMA) and BM / 64 consumer
// warpgroups (wgmma), with full/empty mbarrier pairs per pipeline stage.
// TF32 rounding is free: the tensor maps declare the data TFLOAT32, so TMA
// rounds each element to nearest while copying it (the approach of CUTLASS's
// sm90 TF32 kernels; see docs/tf32_tensorcore_design.md); only the 3xTF32
// split in registers (kSplit3) loads FP32 and rounds its parts itself. Instantiated per
// configuration in wgmma_gemm_<config>.cu.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <type_traits>

#include <cuda.h>

#include "epilogue.cuh"
#include "launch_util.h"
#include "pack_kmajor.h"
#include "ptx_sm90.cuh"
#include "splitk_reduce.h"
#include "tensor_map.h"
#include "tf32_split.cuh"
#include "tile_raster.cuh"
#include "wgmma_config.h"

namespace pygpukit {
namespace wgmma_detail {

constexpr int64_t kGroupM = 8;  // grouped rasterization (tile_raster.cuh)

struct WgmmaParams {
  int64_t M, N, K, batch;
  float* C;
  int64_t ldc, batch_stride_c;
  Epilogue epilogue;
  // Batch coordinate multiplier of each tensor map: 1, or 0 for an operand
  // broadcast over the batch.
  int batch_step_a, batch_step_b;
  // C is TMA-storable (16-byte aligned base, ldc and batch stride multiples
  // of 4); otherwise the epilogue's threads copy it out of shared memory.
  bool tma_store;
  // Split-K: K is cut into `splits` ranges of k_tiles_per_split k-tiles;
  // split s stores its partial product as batch entry s of C (then batch is
  // 1), and a separate pass sums the splits in order (deterministic).
  int splits, k_tiles_per_split;
  // Bytes the TMA copies of one slot deliver (its full barrier's
  // transaction count): the A tile's loaded rows (under kSwapAB without
  // kSwapKMajor all of its 32 x 32 boxes) and the B tile's (kSplit3: its
  // three parts'); with kOwnStagesB, A's in A's ring and B's in B's.
  int stage_tx_bytes, stage_tx_bytes_b;
  // Stream-K for the last wave (stream_k_iters > 0, see cluster_work): the
  // first stream_k_whole work items run whole, the k-tiles of the rest
  // (stream_k_iters in all) are cut into one equal range per cluster of the
  // grid. Partial sums and the tail tiles' arrival counters (zeroed before
  // the launch) live in the workspace.
  int64_t stream_k_whole, stream_k_iters;
  float* stream_k_partials;
  uint32_t* stream_k_counters;
  // The weight (the caller's B) is read once (weight_read_once): its loads
  // are marked L2 evict-first.
  bool weight_evict_first;
};

// One unit of the persistent schedule: an output tile of one batch entry
// over the k-tiles [k_begin, k_end).
struct WorkTile {
  int64_t batch, m0, n0;
  int split, k_begin, k_end;
  // Stream-K: this item is one segment of tail tile `tail` (-1: a whole
  // tile), whose segments belong to clusters first_cluster ..
  // first_cluster + segments - 1 in k order; this one is its cluster's
  // range's segment `slot` (0 or 1).
  int64_t tail = -1, first_cluster = 0;
  int segments = 0, slot = 0;
};

// Work items of the persistent schedule: cluster tiles x batch x splits.
template <class Cfg>
__host__ __device__ __forceinline__ int64_t work_count(const WgmmaParams& p) {
  return Cfg::cluster_tiles(p.M, p.N) * p.batch * p.splits;
}

// Work item w: a cluster tile (kClusterM vertically adjacent threadblock
// tiles, block `rank` taking the rank-th) of one batch entry and one K
// split. Items are numbered split by split, then batch entry by batch entry,
// in grouped order inside each (tile_raster.cuh), so the blocks running at
// once read the same K range of neighbouring panels.
template <class Cfg>
__device__ __forceinline__ WorkTile work_tile(const WgmmaParams& p, int64_t w, uint32_t rank) {
  const int64_t cluster_tiles_m = ceil_div(p.M, Cfg::BM * Cfg::kClusterM);
  const int64_t tiles_n = ceil_div(p.N, Cfg::BN);
  const int64_t per_batch = cluster_tiles_m * tiles_n;
  const int64_t per_split = per_batch * p.batch;
  const int split = int(w / per_split);
  w %= per_split;
  const TileCoord t = grouped_tile<kGroupM>(w % per_batch, cluster_tiles_m, tiles_n);
  const int k_tiles = int(ceil_div(p.K, Cfg::BK));
  const int k_begin = split * p.k_tiles_per_split;
  return {w / per_batch, (t.m * Cfg::kClusterM + rank) * Cfg::BM, t.n * Cfg::BN, split, k_begin,
          min(k_begin + p.k_tiles_per_split, k_tiles)};
}

// First tail k-tile of cluster c's stream-K range (of `clusters`): the
// ranges split stream_k_iters as evenly as integers allow.
__host__ __device__ __forceinline__ int64_t stream_k_begin(const WgmmaParams& p, int64_t c,
                                                           int64_t clusters) {
  return c * p.stream_k_iters / clusters;
}

// Work items of cluster `cluster` of the grid's `clusters`: every
// clusters-th item; with stream-K, its share of the whole items, then the
// segments (one or two: a range is shorter than a tile) of its range.
template <class Cfg>
__device__ __forceinline__ int64_t cluster_items(const WgmmaParams& p, int64_t cluster,
                                                 int64_t clusters) {
  if (p.stream_k_iters == 0) {
    const int64_t works = work_count<Cfg>(p);
    return cluster < works ? (works - 1 - cluster) / clusters + 1 : 0;
  }
  const int64_t k_tiles = ceil_div(p.K, Cfg::BK);
  const int64_t g0 = stream_k_begin(p, cluster, clusters);
  const int64_t g1 = stream_k_begin(p, cluster + 1, clusters);
  return p.stream_k_whole / clusters + (g1 > g0 ? (g1 - 1) / k_tiles - g0 / k_tiles + 1 : 0);
}

// Item i of cluster `cluster`: a whole tile, or a segment of a tail tile.
// Every segment stores its partial sums and counts itself in; the last of
// a tile's segments to arrive adds them all, in k order, and runs the
// epilogue. Nobody waits on anybody: correct whichever clusters are
// resident at once, and reproducible (the order of the sums is fixed).
template <class Cfg>
__device__ __forceinline__ WorkTile cluster_work(const WgmmaParams& p, int64_t cluster,
                                                 int64_t clusters, int64_t i, uint32_t rank) {
  if (p.stream_k_iters == 0 || i < p.stream_k_whole / clusters)
    return work_tile<Cfg>(p, cluster + i * clusters, rank);
  const int64_t k_tiles = ceil_div(p.K, Cfg::BK);
  const int64_t g0 = stream_k_begin(p, cluster, clusters);
  const int64_t g1 = stream_k_begin(p, cluster + 1, clusters);
  const int slot = int(i - p.stream_k_whole / clusters);
  const int64_t t = g0 / k_tiles + slot;
  const int64_t tile_begin = t * k_tiles, tile_end = tile_begin + k_tiles;
  WorkTile tile = work_tile<Cfg>(p, p.stream_k_whole + t, rank);
  tile.k_begin = int(max(g0, tile_begin) - tile_begin);
  tile.k_end = int(min(g1, tile_end) - tile_begin);
  tile.tail = t;
  tile.slot = slot;
  // The clusters whose ranges hold k-tile g: c with begin(c) <= g, i.e.
  // c * iters < (g + 1) * clusters, up to ceil((g + 1) * clusters / iters) - 1.
  auto owner = [&](int64_t g) { return ceil_div((g + 1) * clusters, p.stream_k_iters) - 1; };
  tile.first_cluster = owner(tile_begin);
  tile.segments = int(owner(tile_end - 1) - tile.first_cluster + 1);
  return tile;
}

#if PYGPUKIT_SM90A_DEVICE
// Byte offset of element (row, col) in a tile of 32-float rows stored with
// the 128-byte swizzle, as TMA reads and writes it: the 16-byte chunk index
// within a row XOR row % 8. The tile must start 1024-byte aligned.
__device__ __forceinline__ int swizzle128(int row, int col) {
  return row * 128 + (((col / 4) ^ (row % 8)) * 16) + (col % 4) * 4;
}

// The epilogue's second pass over 16 rows of a 32-column box in an epilogue
// buffer (128-byte swizzled), lane = column: C = act(C + bias), the
// activation's branch hoisted out of the loop (with_activation). `bias` is
// this lane's column's bias (0 without one).
__device__ __forceinline__ void transform_rows(uint8_t* box, int first_row, const Epilogue& e,
                                               float bias, int lane) {
  const bool has_bias = e.bias != nullptr;
  with_activation(e.activation, [&](auto act) {
#pragma unroll 4
    for (int r = first_row; r < first_row + 16; ++r) {
      float* const v = reinterpret_cast<float*>(box + swizzle128(r, lane));
      *v = apply_activation(has_bias ? *v + bias : *v, decltype(act)::value);
    }
  });
}

// The epilogue's copy-out of 16 rows of a 32-column box to C by one warp,
// lane = column (C row-major, rows from grow0 and column gcol, clipped to
// rows x cols): one coalesced 32-float row per instruction at any alignment.
__device__ __forceinline__ void copy_out_rows(const uint8_t* box, int first_row, float* C,
                                              int64_t ldc, int64_t grow0, int64_t gcol,
                                              int64_t rows, int64_t cols, int lane) {
#pragma unroll 4
  for (int r = first_row; r < first_row + 16; ++r) {
    const int64_t grow = grow0 + r;
    if (grow < rows && gcol < cols)
      C[grow * ldc + gcol] = *reinterpret_cast<const float*>(box + swizzle128(r, lane));
  }
}

// Epilogue through shared memory: for each 64 x 32 chunk of this warpgroup's
// 64 x BN accumulators, write them into a buffer in the 128-byte swizzled
// layout the C tensor map expects, apply bias and activation there, then
// store the chunk to C:
//   - with TMA (one thread) when C is TMA-storable: asynchronous, so the
//     consumers start the next tile while the stores drain;
//   - otherwise (C's base or ldc not 16-byte aligned, e.g. N = 4097) by the
//     whole warpgroup, one 32-float row per warp instruction: coalesced at
//     any alignment. Stores straight from the accumulator layout (8 rows x
//     2 columns per instruction, split in scalars when unaligned) made the
//     GEMM ~1.5x slower at 4095x4097x4099 on the H200.
// Bias and activation run as a second pass over the buffer, lane = column,
// in a loop over the warp's 16 rows with the activation's branch hoisted
// out (with_activation): one bias load per lane and chunk, and a small loop.
// Applied per accumulator instead, the 128 unrolled copies of the
// activation's code per tile made the fused kernel at M = 8192, 4096 ->
// 4096 take 910 us with ReLU and 1195 us with GELU against 737 us without
// (H200).
// Two buffers per warpgroup alternate, so writing one overlaps the store of
// the other.
template <class Cfg>
__device__ __forceinline__ void store_tile(const WgmmaParams& p, const CUtensorMap* map_c,
                                           const float (&acc)[Cfg::BN / 2], uint8_t* buffers,
                                           const WorkTile& tile, int c, int lane) {
  const int warp = (threadIdx.x % 128) / 32, g = lane / 4, t = lane % 4;
  const bool leader = threadIdx.x % 128 == 0;
  const int barrier = 1 + c;  // named barrier of this warpgroup
  const bool has_bias = p.epilogue.bias != nullptr;
  const bool transform = has_bias || p.epilogue.activation != Activation::kNone;
  constexpr int kChunks = Cfg::BN / Cfg::kEpilogueCols;
  static_assert(Cfg::kEpilogueCols == 32, "the epilogue passes give each lane one column of a chunk");
#pragma unroll
  for (int chunk = 0; chunk < kChunks; ++chunk) {
    uint8_t* const buffer = buffers + (chunk % 2) * Cfg::kEpilogueBufferBytes;
    const int64_t n0 = tile.n0 + chunk * Cfg::kEpilogueCols;
    const int64_t gcol = n0 + lane;  // this lane's column in the passes over rows
    // Columns past N are never stored; don't read bias there. Loaded before
    // the barrier so its latency hides behind the wait.
    const float bias = has_bias && gcol < p.N ? p.epilogue.bias[gcol] : 0.0f;
    // The store issued from this buffer two chunks ago (possibly in the
    // previous tile) must have read it.
    if (p.tma_store && leader) ptx::bulk_wait_group_read<1>();
    ptx::named_barrier_sync(barrier, 128);
    // Each warp writes (and below transforms and copies out) its own 16 rows.
#pragma unroll
    for (int jj = 0; jj < Cfg::kEpilogueCols / 8; ++jj) {
      const int j = chunk * (Cfg::kEpilogueCols / 8) + jj;  // accumulator n8 block
      const int col = jj * 8 + 2 * t;                        // column inside the chunk
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp * 16 + g + 8 * h;
        *reinterpret_cast<float2*>(buffer + swizzle128(row, col)) =
            make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
    }
    if (transform) {
      __syncwarp();
      transform_rows(buffer, warp * 16, p.epilogue, bias, lane);
    }
    if (p.tma_store) {
      ptx::fence_proxy_async_smem();
      ptx::named_barrier_sync(barrier, 128);
      if (leader) {
        ptx::tma_store_3d(map_c, buffer, int(n0), int(tile.m0 + c * 64),
                          int(tile.batch + tile.split));
        ptx::bulk_commit_group();
      }
    } else {
      ptx::named_barrier_sync(barrier, 128);
      // The next write into this buffer is two chunks on, behind the
      // barrier at the top of the loop: no wait needed here.
      copy_out_rows(buffer, warp * 16, p.C + tile.batch * p.batch_stride_c, p.ldc,
                    tile.m0 + c * 64, gcol, p.M, p.N, lane);
    }
  }
}

// kSwapAB: which of its warpgroup's 64 columns of C a row of the register
// operand holds. With kSwapKMajor (B column-major) the A operand (B^T) lies
// K-major in shared memory, one 128-byte swizzled row per column of C, and
// row g of 8 consecutive rows reads chunk q ^ g for k = 4q + t: all 32 banks,
// so rows go in order. Otherwise it lies N-major, in boxes
// of 32 k-rows x 32 columns with the 128-byte swizzle, and each thread reads
// its fragment elements (rows g and g + 8, k = t and t + 4) one by one.
// Taken in order, the rows g = 0..7 of one k-row would hit two 16-byte chunks
// that the swizzle maps onto the same banks for k = t and t ^ 1: a two-way
// conflict on every load. wgmma does not care which column of C a row
// stands for, so rows are assigned to columns such that the eight rows g of
// a warp's half h read chunks p and p + 4 (p = 2 (warp % 2) + h): XOR k % 8
// with k = 0..3 (or 4..7) then spreads the 32 lanes over all 32 banks.
template <class Cfg>
__device__ __forceinline__ int swap_ab_column(int warp, int g, int h) {
  if constexpr (Cfg::kSwapKMajor) return 16 * warp + 8 * h + g;
  return 32 * (warp / 2) + 4 * (2 * (warp % 2) + h + 4 * (g / 4)) + g % 4;
}

// Byte offset, within one stage's A tile, of the element that register i
// (0..3) of the fragment for k8-step kk holds. K-major: consumer c's 64
// columns are rows 64c .. 64c + 63 of the tile; N-major: boxes 2c and 2c + 1,
// where step kk adds kk * 8 rows of 128 bytes.
template <class Cfg>
__device__ __forceinline__ int swap_ab_fragment_offset(int c, int warp, int lane, int i, int kk) {
  const int g = lane / 4, t = lane % 4, h = i % 2, k = 8 * kk + t + 4 * (i / 2);
  const int col = swap_ab_column<Cfg>(warp, g, h);
  if constexpr (Cfg::kSwapKMajor) return swizzle128(64 * c + col, k);
  return (2 * c + col / 32) * 4096 + swizzle128(k, col % 32);
}

// The epilogue of a kSwapAB configuration: this warpgroup's accumulators are
// C^T, rows = 64 columns of C (in swap_ab_column's order), columns = BN rows
// of C. Each 32-row chunk of C goes through one 8 KB buffer as two 32 x 32
// boxes (columns 0..31 and 32..63 of the warpgroup) in the C map's swizzled
// layout; the rest is store_tile's sequence (bias and activation in a second
// pass, lane = column, then a TMA store or the warpgroup's copy-out).
template <class Cfg>
__device__ __forceinline__ void store_tile_transposed(const WgmmaParams& p,
                                                      const CUtensorMap* map_c,
                                                      const float (&acc)[Cfg::BN / 2],
                                                      uint8_t* buffers, const WorkTile& tile,
                                                      int c, int lane) {
  static_assert(Cfg::kStoreBoxRows == 32 && 2 * 32 * 32 * 4 == Cfg::kEpilogueBufferBytes,
                "a buffer holds two 32 x 32 boxes");
  constexpr int kBoxBytes = 32 * 32 * 4;
  const int warp = (threadIdx.x % 128) / 32, g = lane / 4, t = lane % 4;
  const bool leader = threadIdx.x % 128 == 0;
  const int barrier = 1 + c;
  const bool has_bias = p.epilogue.bias != nullptr;
  const bool transform = has_bias || p.epilogue.activation != Activation::kNone;
  const int64_t rows_c = p.N, cols_c = p.M;  // C's M and N (the kernel runs C^T)
  // The box and rows that this warp transforms and copies out: box warp / 2,
  // rows 16 (warp % 2) .. + 15, lane = column.
  const int box = warp / 2, first_row = 16 * (warp % 2);
  const int64_t col0 = tile.m0 + c * 64;  // C's first column of this warpgroup
  const int64_t gcol = col0 + 32 * box + lane;
  const float bias = has_bias && gcol < cols_c ? p.epilogue.bias[gcol] : 0.0f;
  constexpr int kChunks = Cfg::BN / 32;
#pragma unroll
  for (int chunk = 0; chunk < kChunks; ++chunk) {
    uint8_t* const buffer = buffers + (chunk % 2) * Cfg::kEpilogueBufferBytes;
    const int64_t row0 = tile.n0 + chunk * 32;  // C's first row of this chunk
    if (p.tma_store && leader) ptx::bulk_wait_group_read<1>();
    ptx::named_barrier_sync(barrier, 128);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int j = chunk * 4 + jj;  // accumulator n8 block: C's rows 8j .. 8j + 7
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int col = swap_ab_column<Cfg>(warp, g, h);
#pragma unroll
        for (int e = 0; e < 2; ++e)
          *reinterpret_cast<float*>(buffer + (col / 32) * kBoxBytes +
                                    swizzle128(jj * 8 + 2 * t + e, col % 32)) = acc[4 * j + 2 * h + e];
      }
    }
    // Each box holds two warps' rows of the accumulators.
    ptx::named_barrier_sync(barrier, 128);
    uint8_t* const own_box = buffer + box * kBoxBytes;
    if (transform) transform_rows(own_box, first_row, p.epilogue, bias, lane);
    if (p.tma_store) {
      ptx::fence_proxy_async_smem();
      ptx::named_barrier_sync(barrier, 128);
      if (leader) {
        for (int b = 0; b < 2; ++b)
          ptx::tma_store_3d(map_c, buffer + b * kBoxBytes, int(col0 + 32 * b), int(row0),
                            int(tile.batch + tile.split));
        ptx::bulk_commit_group();
      }
    } else {
      // Every lane reads back what it wrote in the pass above, or what the
      // barrier after the writes ordered: no further barrier.
      copy_out_rows(own_box, first_row, p.C + tile.batch * p.batch_stride_c, p.ldc, row0, gcol,
                    rows_c, cols_c, lane);
    }
  }
}

// Stream-K's shared partial sums: consumer warpgroup c of block `rank`
// of cluster `cluster`, its range's segment `slot`, 128 x kAcc floats in
// the accumulators' register layout (element i of thread t at i * 128 + t:
// coalesced, and thread t reads back what thread t of any segment wrote).
template <class Cfg>
__device__ __forceinline__ float* stream_k_partial(const WgmmaParams& p, int64_t cluster, int slot,
                                                   uint32_t rank, int c) {
  const int64_t unit = ((cluster * 2 + slot) * Cfg::kClusterM + rank) * Cfg::kConsumers + c;
  return p.stream_k_partials + unit * (Cfg::BN / 2) * 128 + threadIdx.x % 128;
}

// One stream-K segment's end: store this warpgroup's partial sums, count
// the segment in (one thread, after a barrier of the warpgroup: the
// acq_rel add releases everyone's stores), and return whether it arrived
// last; then acc = the sum of all the tile's segments in k order (read
// back from L2, this one's included), ready for the epilogue. `last` is a
// word of shared memory of this warpgroup.
template <class Cfg>
__device__ __forceinline__ bool finish_stream_k_segment(const WgmmaParams& p,
                                                        float (&acc)[Cfg::BN / 2],
                                                        const WorkTile& tile, int64_t cluster,
                                                        int64_t clusters, uint32_t rank, int c,
                                                        uint32_t* last) {
  constexpr int kAcc = Cfg::BN / 2;
  float* const own = stream_k_partial<Cfg>(p, cluster, tile.slot, rank, c);
#pragma unroll
  for (int i = 0; i < kAcc; ++i) __stcg(own + i * 128, acc[i]);
  ptx::named_barrier_sync(1 + c, 128);
  if (threadIdx.x % 128 == 0) {
    __threadfence();
    uint32_t* const counter =
        p.stream_k_counters + (tile.tail * Cfg::kClusterM + rank) * Cfg::kConsumers + c;
    *last = ptx::atom_add_acq_rel_gpu(counter, 1) + 1 == uint32_t(tile.segments);
  }
  ptx::named_barrier_sync(1 + c, 128);
  if (!*last) return false;
  const int64_t k_tiles = ceil_div(p.K, Cfg::BK);
  for (int s = 0; s < tile.segments; ++s) {
    const int64_t peer = tile.first_cluster + s;
    // Which segment of the peer's range this tile is: its first, or second.
    const int slot = int(tile.tail - stream_k_begin(p, peer, clusters) / k_tiles);
    const float* const src = stream_k_partial<Cfg>(p, peer, slot, rank, c);
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = s == 0 ? __ldcg(src + i * 128) : acc[i] + __ldcg(src + i * 128);
  }
  return true;
}

// Consumer warpgroup c: for each work tile of this block, the mainloop and
// the epilogue of rows 64c..64c+63. The producer keeps loading the next
// tile's first k-tiles while this runs the epilogue. stream_k_last: a word
// of shared memory of this warpgroup (finish_stream_k_segment).
template <class Cfg, class TileA, class TileB>
__device__ __forceinline__ void consume(const WgmmaParams& p, const CUtensorMap* map_c,
                                        TileA tile_a, TileB tile_b, uint8_t* epilogue_smem,
                                        uint64_t* full, uint64_t* empty, uint64_t* full_b,
                                        uint64_t* empty_b, uint32_t rank,
                                        int c, int lane, uint32_t* stream_k_last) {
  // Frees pipeline slot `it` in every block of the cluster (each holds our
  // multicast B slice there) once this warp's MMAs on it completed; with
  // kOwnStagesB, B's slot too.
  auto release = [&](int it) {
    if (lane == 0) {
      for (uint32_t cta = 0; cta < Cfg::kClusterM; ++cta)
        ptx::mbarrier_arrive_cluster(&empty[it % Cfg::kStages], cta);
      if constexpr (Cfg::kOwnStagesB) ptx::mbarrier_arrive_cluster(&empty_b[it % Cfg::kStagesB], 0);
    }
  };
  constexpr int kAcc = Cfg::BN / 2;  // accumulators per thread
  constexpr int kPromote = Cfg::kPromoteKTiles;
  float acc[kAcc];
  float total[kAcc];  // the promoted sums (kPromote > 0 only; otherwise unused)
  // kSwapAB: where register i of this thread's A fragment for k8-step kk
  // lies in a stage.
  const int warp = (threadIdx.x % 128) / 32;
  auto a_offset = [&](int i, int kk) { return swap_ab_fragment_offset<Cfg>(c, warp, lane, i, kk); };
  // kSwapAB: this thread's A fragments of the k-tile in stage s, as they lie
  // there (rounded to TF32 by TMA, or FP32 for kSplit3 to split).
  auto load_fragments = [&](uint32_t(&f)[Cfg::BK / 8][4], int s) {
    const uint32_t a0 = ptx::smem_addr(tile_a(s));
#pragma unroll
    for (int kk = 0; kk < Cfg::BK / 8; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) f[kk][i] = ptx::ld_shared_b32(a0 + a_offset(i, kk));
  };
  // Adds the retired accumulation into the promoted sums (kPromote > 0).
  auto promote_acc = [&]() {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      ptx::fence_operand(acc[i]);
      total[i] += acc[i];
    }
  };
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  int it = 0;  // pipeline slot counter, continuous across work tiles
  const int64_t cluster = blockIdx.x / Cfg::kClusterM, clusters = gridDim.x / Cfg::kClusterM;
  const int64_t items = cluster_items<Cfg>(p, cluster, clusters);
  for (int64_t item = 0; item < items; ++item) {
    const WorkTile tile = cluster_work<Cfg>(p, cluster, clusters, item, rank);
    bool previous_released = true;  // the slot of k-tile kt - 1 (none before the first)
    if constexpr (kPromote > 0) {
      // -0 + x is x for every x (+0 + -0 would be +0): the first promotion's
      // sums come out bitwise as the accumulators were.
#pragma unroll
      for (int i = 0; i < kAcc; ++i) total[i] = -0.0f;
    }
    // One k-tile: wait for its slot(s), issue(s, sb, fresh) its MMAs (A's
    // tile in slot s, B's in slot sb), then either
    // promote or keep them in flight while releasing the previous slot.
    auto k_tile = [&](int kt, auto&& issue) {
      const int s = it % Cfg::kStages;
      // Position in the promotion period. The two consumer warpgroups are
      // half a period apart, so that one drains its MMAs for a promotion
      // while the other's keep the tensor cores busy.
      const int phase = kt - tile.k_begin + (kPromote > 0 ? c * (kPromote / 2) : 0);
      // A new accumulation starts at each tile (overwriting what the last
      // tile left) and, with promotion, at each period.
      const bool fresh = kt == tile.k_begin || (kPromote > 0 && phase % kPromote == 0);
      const bool promote = kPromote > 0 && ((phase + 1) % kPromote == 0 || kt + 1 == tile.k_end);
      ptx::mbarrier_wait(&full[s], (it / Cfg::kStages) & 1);
      const int sb = it % Cfg::kStagesB;
      if constexpr (Cfg::kOwnStagesB) ptx::mbarrier_wait(&full_b[sb], (it / Cfg::kStagesB) & 1);
      issue(s, sb, fresh);
      ptx::wgmma_commit_group();
      if (promote) {
        // Every MMA of the period must be done before its sum is read.
        ptx::wgmma_wait_group<0>();
        if (!previous_released) release(it - 1);
        release(it);
        promote_acc();
        previous_released = true;
      } else {
        // Keep this k-tile's MMAs in flight while releasing the previous
        // slot, whose MMAs are now complete.
        ptx::wgmma_wait_group<1>();
        if (!previous_released) release(it - 1);
        previous_released = false;
      }
      ++it;
    };
    if constexpr (Cfg::kSplit3) {
      // 3xTF32: each k-tile's B^T fragments are loaded as FP32 and split in
      // registers, then three MMAs per k8 step against A's parts, small
      // terms first, and the k-tile is promoted. The split's special cases
      // (Inf, NaN, values within 2^-12 of FLT_MAX) are tested once per
      // k-tile, one compare per value, and the short split runs where none
      // occurs (as in the skinny kernel).
      struct Fragments {
        uint32_t big[Cfg::BK / 8][4], small[Cfg::BK / 8][4], corr[Cfg::BK / 8][4];
      };
      using Loaded = uint32_t[Cfg::BK / 8][4];  // a k-tile's FP32 fragments as loaded
      // Waits for pipeline slot i's data and loads this thread's fragments.
      auto load = [&](Loaded& v, int i) {
        ptx::mbarrier_wait(&full[i % Cfg::kStages], (i / Cfg::kStages) & 1);
        load_fragments(v, i % Cfg::kStages);
      };
      // Splits loaded fragments into f.
      auto split_into = [&](Fragments& f, const Loaded& v) {
        bool plain = true;
#pragma unroll
        for (int kk = 0; kk < Cfg::BK / 8; ++kk)
#pragma unroll
          for (int j = 0; j < 4; ++j) plain &= tf32_split_is_plain(__uint_as_float(v[kk][j]));
        auto split = [&](auto is_plain) {
#pragma unroll
          for (int kk = 0; kk < Cfg::BK / 8; ++kk)
#pragma unroll
            for (int j = 0; j < 4; ++j)
              tf32_split_operand<decltype(is_plain)::value>(v[kk][j], f.big[kk][j],
                                                             f.small[kk][j], f.corr[kk][j]);
        };
        // Only registers differ between the two paths: no wgmma diverges.
        if (__all_sync(0xFFFFFFFFu, plain)) split(std::true_type{});
        else split(std::false_type{});
        // Final here: the compiler must not finish the split after the
        // wgmma.fence before this set's MMAs (ptxas then fences between
        // them, and with two sets the split leaves the other set's MMAs).
#pragma unroll
        for (int kk = 0; kk < Cfg::BK / 8; ++kk)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            ptx::fence_operand(f.big[kk][j]);
            ptx::fence_operand(f.small[kk][j]);
            ptx::fence_operand(f.corr[kk][j]);
          }
      };
      // Slot i's MMAs from f, into a fresh accumulation. A's parts in the
      // slot: big, small, corr; their descriptors are one computed
      // descriptor advanced by each part's and k8 step's offset.
      auto issue = [&](const Fragments& f, int i) {
        const uint64_t b = ptx::smem_desc_kmajor_sw128(ptx::smem_addr(tile_b(i % Cfg::kStages)));
        auto part = [&](int q, int kk) {
          return ptx::smem_desc_advance(b, q * Cfg::kPartBytesB + kk * 32);
        };
        ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Cfg::BK / 8; ++kk)
          ptx::wgmma_tf32_rs<Cfg::BN>(acc, f.small[kk], part(2, kk), kk > 0);
#pragma unroll
        for (int kk = 0; kk < Cfg::BK / 8; ++kk)
          ptx::wgmma_tf32_rs<Cfg::BN>(acc, f.corr[kk], part(1, kk), true);
#pragma unroll
        for (int kk = 0; kk < Cfg::BK / 8; ++kk)
          ptx::wgmma_tf32_rs<Cfg::BN>(acc, f.big[kk], part(0, kk), true);
        ptx::wgmma_commit_group();
      };
      // With room for two fragment sets (the 64-row tile: 32 + 32
      // accumulators, 2 x 48 fragments), the next k-tile's loads and split
      // run while this k-tile's MMAs do; the 128-row tile (64 + 64
      // accumulators) has room for one set and the next k-tile's 16 loaded
      // values: its loads run during the MMAs, its split after them.
      constexpr bool kOverlap = Cfg::BN == 64;
      Fragments f[kOverlap ? 2 : 1];
      Fragments& f0 = f[0];
      Fragments& f1 = f[kOverlap ? 1 : 0];
      // Both consumers would start together and then stay in step, loading
      // and splitting at the same time while the tensor cores idle. So
      // consumer 1 starts once consumer 0's first k-tile is done. Once per
      // block: a barrier per tile could see consumer 0 arrive twice (tiles
      // of fewer k-tiles than stages) before consumer 1 waits.
      static_assert(Cfg::kConsumers == 2, "one consumer waits for the other");
      constexpr int kStaggerBarrier = 3;  // after 0 (__syncthreads) and the consumers' 1, 2
      bool stagger = c == 0 && item == 0;
      if (c == 1 && item == 0) ptx::named_barrier_sync(kStaggerBarrier, 256);
      // A tile's first k-tile, loaded and split into f.
      auto load_first = [&](Fragments& f) {
        Loaded v;
        load(v, it);
        split_into(f, v);
      };
      // One k-tile: its MMAs from cur, the next k-tile (if has_next) loaded
      // and split into next (the split after the MMAs retired with one
      // set), the slot released, the accumulation promoted.
      auto step = [&](const Fragments& cur, Fragments& next, bool has_next) {
        issue(cur, it);
        Loaded v;
        if (has_next) load(v, it + 1);
        if (kOverlap && has_next) split_into(next, v);
        ptx::wgmma_wait_group<0>();
        release(it);
        promote_acc();
        if (!kOverlap && has_next) split_into(next, v);
        ++it;
        if (stagger) ptx::named_barrier_arrive(kStaggerBarrier, 256);
        stagger = false;
      };
      if constexpr (kOverlap) {
        // Two k-tiles per trip, from f0 then f1, so that each set has fixed
        // registers and no wgmma sits under a condition (see the RS
        // mainloop below); an odd count's first k-tile runs alone from f1.
        int kt = tile.k_begin;
        if ((tile.k_end - kt) % 2 == 1) {
          load_first(f1);
          step(f1, f0, kt + 1 < tile.k_end);
          ++kt;
        } else {
          load_first(f0);
        }
        for (; kt < tile.k_end; kt += 2) {
          step(f0, f1, true);
          step(f1, f0, kt + 2 < tile.k_end);
        }
      } else {
        load_first(f0);
        for (int kt = tile.k_begin; kt < tile.k_end; ++kt) step(f0, f0, kt + 1 < tile.k_end);
      }
    } else if constexpr (Cfg::kSwapAB) {
      // The fragments of two consecutive k-tiles: one is read by MMAs in
      // flight while the other is loaded.
      uint32_t frag[2][Cfg::BK / 8][4];
      // One k-tile in the RS form: the whole k-tile's fragments first (TMA
      // rounded them to TF32), so one fence covers them, then its MMAs.
      auto issue_rs = [&](uint32_t(&f)[Cfg::BK / 8][4], int s, int sb, bool fresh) {
        const uint32_t b0 = ptx::smem_addr(tile_b(sb));
        load_fragments(f, s);
        ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Cfg::BK / 8; ++kk)
          ptx::wgmma_tf32_rs<Cfg::BN>(acc, f[kk], ptx::smem_desc_kmajor_sw128(b0 + kk * 32),
                                      !fresh || kk > 0);
      };
      // wgmma reads its A registers until the wait_group that retires it, and
      // nothing (not ptxas) keeps a load from overwriting them before: one
      // array reloaded every k-tile did, while wait_group<1> kept the previous
      // k-tile's MMAs running (wrong results on the H200). So k-tiles
      // alternate between two arrays: the one a k-tile loads was last read
      // by the MMAs of two k-tiles before, which the previous k-tile's
      // wait_group<1> retired. Two k-tiles per trip give each array fixed
      // registers, and an odd count's first k-tile runs alone on array 1, so
      // that wherever a trip starts only array 1 can still be in flight.
      // (Choosing the array by a branch made ptxas add a dummy wgmma where
      // the branches join; a conditional second k-tile in the trip made it
      // serialize every wgmma.)
      auto rs0 = [&](int s, int sb, bool fresh) { issue_rs(frag[0], s, sb, fresh); };
      auto rs1 = [&](int s, int sb, bool fresh) { issue_rs(frag[1], s, sb, fresh); };
      int kt = tile.k_begin;
      if ((tile.k_end - kt) % 2 == 1) k_tile(kt++, rs1);
      for (; kt < tile.k_end; kt += 2) {
        k_tile(kt, rs0);
        k_tile(kt + 1, rs1);
      }
    } else {
      auto ss = [&](int s, int sb, bool fresh) {
        const uint32_t a0 = ptx::smem_addr(tile_a(s)) + c * 64 * 128;
        const uint32_t b0 = ptx::smem_addr(tile_b(sb));
        ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Cfg::BK / 8; ++kk) {
          ptx::wgmma_tf32<Cfg::BN>(acc, ptx::smem_desc_kmajor_sw128(a0 + kk * 32),
                                   ptx::smem_desc_kmajor_sw128(b0 + kk * 32), !fresh || kk > 0);
        }
      };
      for (int kt = tile.k_begin; kt < tile.k_end; ++kt) k_tile(kt, ss);
    }
    ptx::wgmma_wait_group<0>();  // unconditional: ptxas must see it before acc is read
    if (!previous_released) release(it - 1);
#pragma unroll
    for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[i]);

    if constexpr (kPromote == 0) {
      // A stream-K segment: on unless it arrived last (then acc holds the tile).
      if (tile.tail >= 0 &&
          !finish_stream_k_segment<Cfg>(p, acc, tile, cluster, clusters, rank, c, stream_k_last))
        continue;
    }
    auto store = [&](const float(&result)[kAcc]) {
      if constexpr (Cfg::kSwapAB)
        store_tile_transposed<Cfg>(p, map_c, result, epilogue_smem, tile, c, lane);
      else store_tile<Cfg>(p, map_c, result, epilogue_smem, tile, c, lane);
    };
    // The promoted sums, or the one accumulation.
    if constexpr (kPromote > 0) store(total);
    else store(acc);
  }
  // The last TMA stores must have read their shared memory before we exit.
  if (p.tma_store && threadIdx.x % 128 == 0) ptx::bulk_wait_group_all();
}
#endif

// Cluster dimensions exist from sm_90 on: other device passes (sm_80..89,
// where this kernel only traps) must not see the attribute.
#if !defined(__CUDA_ARCH__) || PYGPUKIT_SM90A_DEVICE
#define PYGPUKIT_CLUSTER_DIMS(x) __cluster_dims__(x, 1, 1)
#else
#define PYGPUKIT_CLUSTER_DIMS(x)
#endif

template <class Cfg>
__global__ void PYGPUKIT_CLUSTER_DIMS(Cfg::kClusterM) __launch_bounds__(Cfg::kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap map_a,
                      const __grid_constant__ CUtensorMap map_b,
                      const __grid_constant__ CUtensorMap map_c, const WgmmaParams p) {
#if PYGPUKIT_SM90A_DEVICE
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  // Slot s: A tile [BM][BK] then B tile [BN][BK], both K-major, swizzled
  // (under kSwapAB without kSwapKMajor, A as BM / 32 N-major 32 x 32 boxes;
  // with kSplit3, B as its three parts, [BN][BK] each); with kOwnStagesB,
  // A's slots, then B's.
  auto tile_a = [smem](int s) { return smem + s * Cfg::kStageBytes; };
  auto tile_b = [smem](int s) {
    return Cfg::kOwnStagesB ? smem + Cfg::kStages * Cfg::kStageBytes + s * Cfg::kStageBytesB
                            : smem + s * Cfg::kStageBytes + Cfg::kStageBytesA;
  };
  uint8_t* const epilogue_smem = smem + Cfg::kTileBytes;
  uint64_t* const full =
      reinterpret_cast<uint64_t*>(epilogue_smem + Cfg::kEpilogueBytes);
  uint64_t* const empty = full + Cfg::kStages;
  uint64_t* const full_b = Cfg::kOwnStagesB ? empty + Cfg::kStages : full;
  uint64_t* const empty_b = Cfg::kOwnStagesB ? full_b + Cfg::kStagesB : empty;

  const int warpgroup = threadIdx.x / 128;
  const int lane = threadIdx.x % 32;
  const uint32_t rank = ptx::cluster_cta_rank();
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);  // the producer's expect_tx
      // Every consumer warp of every block in the cluster: a slot is free
      // only when no block still reads the B slice we multicast into it.
      ptx::mbarrier_init(&empty[s], Cfg::kClusterM * Cfg::kConsumers * 4);
    }
    if constexpr (Cfg::kOwnStagesB)
      for (int s = 0; s < Cfg::kStagesB; ++s) {
        ptx::mbarrier_init(&full_b[s], 1);
        ptx::mbarrier_init(&empty_b[s], Cfg::kConsumers * 4);  // unclustered (WgmmaConfig)
      }
    ptx::fence_barrier_init();
  }
  // Launched programmatically, the kernel before this one may still run:
  // only shared memory is touched before this point.
  ptx::programmatic_launch_start();
  // Peers multicast into our shared memory and arrive on our barriers: they
  // must all be initialized first.
  ptx::cluster_sync();

  constexpr int kSliceRows = Cfg::BN / Cfg::kClusterM;  // rows of B this block loads
  constexpr uint16_t kAllCtas = (1u << Cfg::kClusterM) - 1;

  if (warpgroup == 0) {
    // 128 x 40 + 256 x 232 registers fit the SM's 64K with one block.
    ptx::setmaxnreg_dec<40>();
    // Producer: one thread walks the k-tiles of every work tile, refilling
    // a slot as soon as every consumer warp of the cluster released it;
    // with kOwnStagesB a thread of another warp does the same for B's ring.
    // walk(load) calls load(it, tile, kt) for every k-tile in order, `it`
    // counting the k-tiles across work tiles as the consumers do.
    auto walk = [&](auto&& load) {
      int it = 0;
      const int64_t cluster = blockIdx.x / Cfg::kClusterM, clusters = gridDim.x / Cfg::kClusterM;
      const int64_t items = cluster_items<Cfg>(p, cluster, clusters);
      for (int64_t item = 0; item < items; ++item) {
        const WorkTile tile = cluster_work<Cfg>(p, cluster, clusters, item, rank);
        for (int kt = tile.k_begin; kt < tile.k_end; ++kt, ++it) load(it, tile, kt);
      }
    };
    // The weight is the caller's B: the kernel's A under kSwapAB.
    const uint64_t policy_weight = p.weight_evict_first ? ptx::l2_policy_evict_first() : 0;
    const uint64_t policy_a = Cfg::kSwapAB ? policy_weight : 0;
    const uint64_t policy_b = Cfg::kSwapAB ? 0 : policy_weight;
    // B's tile of k-tile kt into `dst`, counted on `bar`.
    auto load_b = [&](uint8_t* dst, uint64_t* bar, const WorkTile& tile, int kt) {
      const int batch_b = int(tile.batch * p.batch_step_b);
      if constexpr (Cfg::kSplit3) {
        // A's three parts, each in its own segment of packed_ld(K) columns.
        const int segment = int(packed_ld(p.K));
        for (int q = 0; q < Cfg::kPartsB; ++q)
          ptx::tma_load_3d(dst + q * Cfg::kPartBytesB, &map_b, bar, q * segment + kt * Cfg::BK,
                           int(tile.n0), batch_b);
      } else if constexpr (Cfg::kClusterM == 1) {
        ptx::tma_load_3d(dst, &map_b, bar, kt * Cfg::BK, int(tile.n0), batch_b, policy_b);
      } else {
        ptx::tma_load_3d_multicast(dst + rank * kSliceRows * Cfg::BK * 4, &map_b, bar, kAllCtas,
                                   kt * Cfg::BK, int(tile.n0 + rank * kSliceRows), batch_b);
      }
    };
    // The first pass over a ring's slots waits on the phase "before" a
    // fresh barrier, which counts as completed.
    if (threadIdx.x == 0) {
      walk([&](int it, const WorkTile& tile, int kt) {
        const int s = it % Cfg::kStages;
        ptx::mbarrier_wait(&empty[s], ((it / Cfg::kStages) & 1) ^ 1);
        // Our A tile, plus (unless kOwnStagesB) all kClusterM slices of B,
        // ours and the peers'.
        ptx::mbarrier_arrive_expect_tx(&full[s], p.stage_tx_bytes);
        const int batch_a = int(tile.batch * p.batch_step_a);
        if constexpr (Cfg::kSwapAB && !Cfg::kSwapKMajor) {
          // B^T from the row-major B: boxes of 32 k-rows x 32 columns.
          for (int box = 0; box < Cfg::BM / 32; ++box)
            ptx::tma_load_3d(tile_a(s) + box * 32 * Cfg::BK * 4, &map_a, &full[s],
                             int(tile.m0 + 32 * box), kt * Cfg::BK, batch_a, policy_a);
        } else {
          ptx::tma_load_3d(tile_a(s), &map_a, &full[s], kt * Cfg::BK, int(tile.m0), batch_a,
                           policy_a);
        }
        if constexpr (!Cfg::kOwnStagesB) load_b(tile_b(s), &full[s], tile, kt);
      });
    } else if (Cfg::kOwnStagesB && threadIdx.x == 32) {
      walk([&](int it, const WorkTile& tile, int kt) {
        const int sb = it % Cfg::kStagesB;
        ptx::mbarrier_wait(&empty_b[sb], ((it / Cfg::kStagesB) & 1) ^ 1);
        ptx::mbarrier_arrive_expect_tx(&full_b[sb], p.stage_tx_bytes_b);
        load_b(tile_b(sb), &full_b[sb], tile, kt);
      });
    }
  } else {
    ptx::setmaxnreg_inc<232>();
    const int c = warpgroup - 1;
    __shared__ uint32_t stream_k_last[Cfg::kConsumers];
    consume<Cfg>(p, &map_c, tile_a, tile_b, epilogue_smem + c * 2 * Cfg::kEpilogueBufferBytes,
                 full, empty, full_b, empty_b, rank, c, lane, &stream_k_last[c]);
  }
  // No block may exit while a peer can still multicast into its shared
  // memory or arrive on its barriers.
  ptx::cluster_sync();
#else
  // Built without sm_90a: the dispatcher never launches this (see
  // PYGPUKIT_HAS_SM90A); trap rather than leave C unwritten.
  __trap();
#endif
}


// Stream-K ranges shorter than this many k-tiles are not worth their
// partial sums (128 KB per block of a 128 x 256 tile, written and read back
// through L2): without stream-K the last wave just runs part-empty.
constexpr int64_t kStreamKMinRange = 16;
// Stream-K only where the last wave is at most this full (tail tiles /
// clusters). H200, the target set interleaved with and without it
// (session 8): last waves 52%, 6% and 15% full (8192^3, 16384^3,
// 8192x14336x4096) ran 2.0%, 1.8% and 3.9% faster; 88% and 76% full
// (4096^3, 8192x4096x14336) 7.3% and 1.6% slower: there a nearly full
// wave saves less than the segments' partial sums cost.
constexpr double kStreamKMaxTailFill = 0.6;

// The stream-K split of the last wave for a kernel-oriented M x N x K
// problem on `clusters` grid clusters, and its workspace: counters (one per
// tail tile, block and warpgroup), then partial sums (two segments per
// cluster), for a launch without split-K. Off (iters == 0) with promotion
// (the promoted sums are not what the segments would add), and where the
// work fills its waves, its last wave is mostly full, or the ranges would be
// short.
struct StreamKPlan {
  int64_t whole = 0, iters = 0;
  size_t counter_bytes = 0, bytes = 0;
};

// PYGPUKIT_STREAM_K=0 turns it off, to measure what it gains.
template <class Cfg>
StreamKPlan stream_k_plan(int64_t M, int64_t N, int64_t K, int64_t batch, int64_t clusters) {
  StreamKPlan plan;
  const char* env = std::getenv("PYGPUKIT_STREAM_K");
  if (env != nullptr && env[0] == '0' && env[1] == '\0') return plan;
  const int64_t works = Cfg::cluster_tiles(M, N) * batch;
  const int64_t tail = works % clusters;
  const int64_t iters = tail * ceil_div(K, Cfg::BK);
  if (Cfg::kPromoteKTiles > 0 || works < clusters || tail == 0 ||
      double(tail) > kStreamKMaxTailFill * double(clusters) || iters < kStreamKMinRange * clusters)
    return plan;
  plan.whole = works - tail;
  plan.iters = iters;
  const int64_t units = Cfg::kClusterM * Cfg::kConsumers;
  plan.counter_bytes = size_t(round_up(tail * units * 4, 256));
  plan.bytes = plan.counter_bytes + size_t(clusters * 2 * units * (Cfg::BN / 2) * 128 * 4);
  return plan;
}

// The persistent grid's clusters for `works` work items: one per resident
// slot (cached per device), at most one per item. Also lets the kernel use
// its shared memory, which the residency query needs first.
template <class Cfg>
cudaError_t grid_clusters(int64_t works, int64_t* clusters) {
  auto kernel = wgmma_gemm_kernel<Cfg>;
  static std::atomic<uint64_t> smem_configured{0};
  const cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel),
                                             Cfg::kSmemBytes, smem_configured);
  if (err != cudaSuccess) return err;
  static std::array<std::atomic<int>, 64> resident{};
  *clusters = std::min<int64_t>(
      works, resident_clusters(reinterpret_cast<const void*>(kernel), Cfg::kThreads,
                               Cfg::kSmemBytes, Cfg::kClusterM, resident));
  return cudaSuccess;
}

// The problem as the kernel runs it: C^T = B^T A^T under kSwapAB.
template <class Cfg>
int64_t kernel_m(const GemmProblem& p) { return Cfg::kSwapAB ? p.N : p.M; }
template <class Cfg>
int64_t kernel_n(const GemmProblem& p) { return Cfg::kSwapAB ? p.M : p.N; }

// Whether each tile of the weight (the caller's B) is loaded by one block
// only, once: all M rows of A fit in one tile and no other batch entry
// shares B. Then its TMA loads are marked L2 evict-first, so the streamed
// weight does not push out of L2 what is read again: the activations (read
// by every block) and the split-K partials (read back by the reduction).
// H200, session 16, in one process, without -> with: split-K shapes 0.4-2.5
// us faster (M = 128, 4096^2: x @ W.T 29.8 -> 27.4, x @ W 29.3 -> 27.3;
// M = 64, 14336 -> 4096: 67.7 -> 65.7); unsplit shapes within 1 us either
// way (4096 -> 14336). Marking x evict-last as well changed nothing. (Under
// kClusterM > 1 without kSwapAB, B arrives by multicast, which takes no
// hint.)
template <class Cfg>
bool weight_read_once(const GemmProblem& p) {
  return p.M <= (Cfg::kSwapAB ? Cfg::BN : Cfg::BM) && (p.batch == 1 || p.batch_stride_b != 0) &&
         (Cfg::kSwapAB || Cfg::kClusterM == 1);
}

}  // namespace wgmma_detail

// Declared in wgmma_config.h.
template <class Cfg>
WgmmaPlan plan_wgmma_gemm(const GemmProblem& p, int splits) {
  using namespace wgmma_detail;
  WgmmaPlan plan;
  plan.weight_evict_first = weight_read_once<Cfg>(p);
  if (splits > 1) {
    plan.workspace_bytes = splitk_partials_bytes(splits, p.M, p.N);
    return plan;
  }
  const int64_t works = Cfg::cluster_tiles(kernel_m<Cfg>(p), kernel_n<Cfg>(p)) * p.batch;
  int64_t clusters = 0;
  if (grid_clusters<Cfg>(works, &clusters) != cudaSuccess) return plan;
  const StreamKPlan sk =
      stream_k_plan<Cfg>(kernel_m<Cfg>(p), kernel_n<Cfg>(p), p.K, p.batch, clusters);
  plan.workspace_bytes = sk.bytes;
  plan.stream_k = sk.iters > 0;
  return plan;
}

// Declared in wgmma_config.h: one pass when splits == 1, else `splits`
// partial products into `partials` followed by the ordered reduction that
// applies the epilogue.
template <class Cfg>
cudaError_t launch_wgmma_gemm(const GemmProblem& p, int splits, float* partials,
                              size_t partials_bytes, cudaStream_t stream) {
  constexpr CUtensorMapDataType kTF32 = CU_TENSOR_MAP_DATA_TYPE_TFLOAT32;
  CUtensorMap map_a, map_b, map_c{};
  // The kernel's operands: A [M][K] and B [N][K], or with kSwapAB A = B^T
  // (read from the row-major B [K][N] in 32 x 32 boxes, or with kSwapKMajor
  // from the column-major B, K-major as it lies) and B = A.
  // Rows of each K-major operand tile loaded per stage: the tile's (for B,
  // each block's multicast slice), but no more than the operand has
  // (rounded up to a 1024-byte swizzle atom) where nothing is multicast. At
  // decode-sized M, TMA's zero fill of the tile's other rows was what the
  // kernel waited on (H200, kSwapAB, 128-row tiles, N = 14336, K = 4096:
  // 106 us at M = 16, 72.5 at M = 128). The rows left unloaded hold stale
  // data; they only reach rows or columns of the kernel's output past its M
  // or N, which the epilogue never stores. (Under kSwapAB without
  // kSwapKMajor the A operand is B^T, loaded in 32 x 32 boxes: all of them.)
  auto rows_loaded = [](int64_t tile_rows, int64_t operand_rows) {
    return int(std::min<int64_t>(tile_rows, ceil_div(operand_rows, 8) * 8));
  };
  const int box_rows_a = rows_loaded(Cfg::BM, wgmma_detail::kernel_m<Cfg>(p));
  const int box_rows_b = Cfg::kClusterM == 1 ? rows_loaded(Cfg::BN, wgmma_detail::kernel_n<Cfg>(p))
                                             : Cfg::BN / Cfg::kClusterM;
  // Each block receives its A tile and every block's slice of B (kSplit3:
  // its three parts), in one slot or (kOwnStagesB) one of each ring.
  const bool a_boxes = Cfg::kSwapAB && !Cfg::kSwapKMajor;  // B^T in 32 x 32 boxes, all loaded
  const int tx_bytes_a = a_boxes ? Cfg::kStageBytesA : box_rows_a * Cfg::BK * 4;
  const int tx_bytes_b = box_rows_b * Cfg::kClusterM * Cfg::BK * 4 * Cfg::kPartsB;
  // kSplit3 splits B^T itself, so TMA must not round it; A comes packed
  // (PackSplit::kPartsAligned), lda = its 3 segments.
  const CUtensorMapDataType type_a = Cfg::kSplit3 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : kTF32;
  const int64_t cols_b = Cfg::kSplit3 ? packed_cols(p.K, PackSplit::kPartsAligned) : p.K;
  const bool encoded =
      Cfg::kSwapAB
          ? (Cfg::kSwapKMajor ? encode_matrix(&map_a, type_a, p.B, p.N, p.K, p.ldb, p.batch,
                                              p.batch_stride_b, box_rows_a)
                              : encode_matrix(&map_a, type_a, p.B, p.K, p.N, p.ldb, p.batch,
                                              p.batch_stride_b, Cfg::BK)) &&
                encode_matrix(&map_b, kTF32, p.A, p.M, cols_b, p.lda, p.batch, p.batch_stride_a,
                              box_rows_b)
          : encode_matrix(&map_a, kTF32, p.A, p.M, p.K, p.lda, p.batch, p.batch_stride_a,
                          box_rows_a) &&
                encode_matrix(&map_b, kTF32, p.B, p.N, p.K, p.ldb, p.batch, p.batch_stride_b,
                              box_rows_b);
  if (!encoded) return cudaErrorInvalidValue;
  const int k_tiles = int(ceil_div(p.K, Cfg::BK));
  const int k_tiles_per_split = int(ceil_div(k_tiles, splits));
  splits = int(ceil_div(k_tiles, k_tiles_per_split));  // no empty split
  const bool a_batched = p.batch_stride_a != 0, b_batched = p.batch_stride_b != 0;
  wgmma_detail::WgmmaParams params{wgmma_detail::kernel_m<Cfg>(p), wgmma_detail::kernel_n<Cfg>(p), p.K,
                     p.batch, p.C, p.ldc, p.batch_stride_c, p.epilogue,
                     Cfg::kSwapAB ? b_batched : a_batched, Cfg::kSwapAB ? a_batched : b_batched,
                     false, splits, k_tiles_per_split,
                     Cfg::kOwnStagesB ? tx_bytes_a : tx_bytes_a + tx_bytes_b, tx_bytes_b,
                     0, 0, nullptr, nullptr, wgmma_detail::weight_read_once<Cfg>(p)};
  // C (or the partials) as stored: always C's own M x N, row-major.
  const int64_t ldp = splitk_partials_ld(p.N);
  if (splits > 1) {  // raw partial products; the reduction applies the epilogue
    if (splitk_partials_bytes(splits, p.M, p.N) > partials_bytes) return cudaErrorInvalidValue;
    params.C = partials;
    params.ldc = ldp;
    params.batch_stride_c = p.M * ldp;
    params.epilogue = Epilogue{};
    params.tma_store = encode_matrix(&map_c, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, partials, p.M, p.N,
                                     ldp, splits, p.M * ldp, Cfg::kStoreBoxRows);
    if (!params.tma_store) return cudaErrorInvalidValue;
  } else {
    params.tma_store = tma_compatible(p.C, p.M, p.ldc, p.batch, p.batch_stride_c) &&
                       encode_matrix(&map_c, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.C, p.M, p.N,
                                     p.ldc, p.batch, p.batch_stride_c, Cfg::kStoreBoxRows);
  }
  // Persistent: one cluster per resident slot, each walking the work items.
  int64_t clusters = 0;
  cudaError_t err = wgmma_detail::grid_clusters<Cfg>(wgmma_detail::work_count<Cfg>(params), &clusters);
  if (err != cudaSuccess) return err;
  if (splits == 1) {
    // Stream-K where plan_wgmma_gemm sized the workspace for it: the plan
    // depends only on the problem, the cached residency and
    // PYGPUKIT_STREAM_K, so it is the same here unless that variable
    // changed in between (then the workspace may be short: leave it out).
    const wgmma_detail::StreamKPlan sk =
        wgmma_detail::stream_k_plan<Cfg>(params.M, params.N, p.K, p.batch, clusters);
    if (sk.iters > 0 && sk.bytes <= partials_bytes) {
      params.stream_k_whole = sk.whole;
      params.stream_k_iters = sk.iters;
      params.stream_k_counters = reinterpret_cast<uint32_t*>(partials);
      params.stream_k_partials = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(partials) +
                                                          sk.counter_bytes);
      err = cudaMemsetAsync(partials, 0, sk.counter_bytes, stream);
      if (err != cudaSuccess) return err;
    }
  }
  // Programmatic dependent launch: the launch and prologue overlap the
  // previous kernel's tail, and the reduction's launch overlaps ours.
  err = launch_kernel<wgmma_detail::wgmma_gemm_kernel<Cfg>>(
      dim3(unsigned(clusters * Cfg::kClusterM)), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream,
      map_a, map_b, map_c, params);
  if (err != cudaSuccess || splits == 1) return err;
  return launch_splitk_reduce(partials, splits, p.M, p.N, ldp, p.C, p.ldc, p.epilogue, stream);
}

// Explicit instantiation of the launcher for one configuration; each
// wgmma_gemm_<config>.cu holds one, so the configurations compile in parallel.
#define PYGPUKIT_INSTANTIATE_WGMMA(CFG)                                                 \
  template WgmmaPlan plan_wgmma_gemm<CFG>(const GemmProblem&, int);                    \
  template cudaError_t launch_wgmma_gemm<CFG>(const GemmProblem&, int, float*, size_t,      \
                                              cudaStream_t);

}  // namespace pygpukit
