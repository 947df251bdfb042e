// The persistent schedule of the Hopper GEMM (wgmma_gemm.cuh): the kernel's
// parameters, its work items (output tiles x batch entries x K splits, in
// grouped order) and stream-K for the last wave (the plan on the host; the
// segments' shared partial sums and their fix-up on the device). See
// "Persistent schedule" and "Split-K and stream-K" in docs/design.md.
#pragma once

#include <cstdint>
#include <cstdlib>

#include "ops/settings.h"
#include "cuda/common/epilogue.cuh"
#include "cuda/common/int_math.h"
#include "cuda/hopper/ptx_sm90.cuh"
#include "cuda/common/tile_raster.cuh"

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
  // Stream-K for the last wave (stream_k_iters > 0, run by
  // wgmma_gemm_kernel<Cfg, true>; see cluster_work): the
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
// clusters-th item; with kStreamK, its share of the whole items, then the
// segments (one or two: a range is shorter than a tile) of its range.
// kStreamK needs p.stream_k_iters > 0 (it would find no items otherwise and
// leave C unwritten): launch_wgmma_gemm chooses the kernel by it.
template <class Cfg, bool kStreamK>
__device__ __forceinline__ int64_t cluster_items(const WgmmaParams& p, int64_t cluster,
                                                 int64_t clusters) {
  if constexpr (!kStreamK) {
    const int64_t works = work_count<Cfg>(p);
    return cluster < works ? (works - 1 - cluster) / clusters + 1 : 0;
  } else {
    const int64_t k_tiles = ceil_div(p.K, Cfg::BK);
    const int64_t g0 = stream_k_begin(p, cluster, clusters);
    const int64_t g1 = stream_k_begin(p, cluster + 1, clusters);
    return p.stream_k_whole / clusters + (g1 > g0 ? (g1 - 1) / k_tiles - g0 / k_tiles + 1 : 0);
  }
}

// Item i of cluster `cluster`: a whole tile, or a segment of a tail tile.
// Every segment stores its partial sums and counts itself in; the last of
// a tile's segments to arrive adds them all, in k order, and runs the
// epilogue. Nobody waits on anybody: correct whichever clusters are
// resident at once, and reproducible (the order of the sums is fixed).
template <class Cfg, bool kStreamK>
__device__ __forceinline__ WorkTile cluster_work(const WgmmaParams& p, int64_t cluster,
                                                 int64_t clusters, int64_t i, uint32_t rank) {
  if constexpr (!kStreamK) {
    return work_tile<Cfg>(p, cluster + i * clusters, rank);
  } else {
    if (i < p.stream_k_whole / clusters) return work_tile<Cfg>(p, cluster + i * clusters, rank);
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
}

#if PYGPUKIT_SM90A_DEVICE
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
#endif

// Stream-K ranges shorter than this many k-tiles are not worth their
// partial sums (128 KB per block of a 128 x 256 tile, written and read back
// through L2): without stream-K the last wave just runs part-empty.
constexpr int64_t kStreamKMinRange = 16;
// Stream-K only where the last wave is at most this full (tail tiles /
// clusters). H200, the target set interleaved with and without it
// (2026-12-01): last waves 52%, 6% and 15% full (8192^3, 16384^3,
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
  if (!stream_k_allowed()) return plan;
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

}  // namespace wgmma_detail
}  // namespace pygpukit
