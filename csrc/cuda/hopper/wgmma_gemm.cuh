// The Hopper TF32 GEMM: TMA copies into 128-byte-swizzled shared memory,
// warp-specialized into one producer warpgroup (TMA) and BM / 64 consumer
// warpgroups (wgmma), with full/empty mbarrier pairs per pipeline stage.
// TF32 rounding is free: the tensor maps declare the data TFLOAT32, so TMA
// rounds each element to nearest while copying it (the approach of CUTLASS's
// sm90 TF32 kernels; see docs/design.md); only the 3xTF32
// split in registers (kSplit3) loads FP32 and rounds its parts itself. Its
// schedule (work items, stream-K) is in wgmma_schedule.cuh, its epilogue in
// wgmma_epilogue.cuh; this file holds the mainloops, the kernel and its
// launcher. Instantiated per configuration in wgmma_gemm_<config>.cu.
#pragma once

#include <algorithm>
#include <array>
#include <cstdlib>
#include <type_traits>

#include <cuda.h>

#include "cuda/launch_util.h"
#include "cuda/common/pack_kmajor.h"
#include "cuda/hopper/ptx_sm90.cuh"
#include "cuda/common/splitk_reduce.h"
#include "cuda/hopper/tensor_map.h"
#include "cuda/common/tf32_split.cuh"
#include "cuda/hopper/wgmma_config.h"
#include "cuda/hopper/wgmma_epilogue.cuh"
#include "cuda/hopper/wgmma_schedule.cuh"

namespace pygpukit {
namespace wgmma_detail {

#if PYGPUKIT_SM90A_DEVICE
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

// The mainloops: one work tile's k-tiles for each kind of configuration,
// on the consumer's accumulators `acc`. k_tile(kt, issue) (consume) waits
// for k-tile kt's slot, runs issue(s, sb, fresh) and handles the slot and
// the promotion; load_fragments(f, s) loads this thread's register operand
// of stage s.

// Both operands from shared memory (the SS form).
template <class Cfg, class TileA, class TileB, class KTile>
__device__ __forceinline__ void ss_mainloop(const WorkTile& tile, KTile& k_tile, TileA tile_a, TileB tile_b,
                                            int c, float (&acc)[Cfg::BN / 2]) {
  auto ss = [&](int s, int sb, bool fresh) {
    const uint64_t a0 = ptx::smem_desc_kmajor_sw128(ptx::smem_addr(tile_a(s)) + c * 64 * 128);
    const uint64_t b0 = ptx::smem_desc_kmajor_sw128(ptx::smem_addr(tile_b(sb)));
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Cfg::BK / 8; ++kk) {
      ptx::wgmma_tf32<Cfg::BN>(acc, ptx::smem_desc_advance(a0, kk * 32),
                               ptx::smem_desc_advance(b0, kk * 32), !fresh || kk > 0);
    }
  };
  for (int kt = tile.k_begin; kt < tile.k_end; ++kt) k_tile(kt, ss);
}

// kSwapAB: B^T from registers (the RS form), A from shared memory.
template <class Cfg, class TileB, class KTile, class LoadFragments>
__device__ __forceinline__ void rs_mainloop(const WorkTile& tile, KTile& k_tile,
                                            LoadFragments& load_fragments, TileB tile_b,
                                            float (&acc)[Cfg::BN / 2]) {
  // The fragments of two consecutive k-tiles: one is read by MMAs in
  // flight while the other is loaded.
  uint32_t frag[2][Cfg::BK / 8][4];
  // One k-tile in the RS form: the whole k-tile's fragments first (TMA
  // rounded them to TF32), so one fence covers them, then its MMAs.
  auto issue_rs = [&](uint32_t(&f)[Cfg::BK / 8][4], int s, int sb, bool fresh) {
    const uint64_t b0 = ptx::smem_desc_kmajor_sw128(ptx::smem_addr(tile_b(sb)));
    load_fragments(f, s);
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Cfg::BK / 8; ++kk)
      ptx::wgmma_tf32_rs<Cfg::BN>(acc, f[kk], ptx::smem_desc_advance(b0, kk * 32),
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
}

// 3xTF32: each k-tile's B^T fragments are loaded as FP32 and split in
// registers, then three MMAs per k8 step against A's parts, small
// terms first, and the k-tile is promoted. The split's special cases
// (Inf, NaN, values within 2^-12 of FLT_MAX) are tested once per
// k-tile, one compare per value, and the short split runs where none
// occurs (as in the skinny kernel).
// first_item: the block's first work tile; it: the pipeline slot counter.
template <class Cfg, class TileB, class LoadFragments, class Release, class Promote>
__device__ __forceinline__ void split3_mainloop(const WorkTile& tile, bool first_item, uint32_t& it,
                                                uint64_t* full, LoadFragments& load_fragments,
                                                Release& release, Promote& promote_acc, TileB tile_b,
                                                int c, float (&acc)[Cfg::BN / 2]) {
  struct Fragments {
    uint32_t big[Cfg::BK / 8][4], small[Cfg::BK / 8][4], corr[Cfg::BK / 8][4];
  };
  using Loaded = uint32_t[Cfg::BK / 8][4];  // a k-tile's FP32 fragments as loaded
  // Waits for pipeline slot i's data and loads this thread's fragments.
  auto load = [&](Loaded& v, uint32_t i) {
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
  bool stagger = c == 0 && first_item;
  if (c == 1 && first_item) ptx::named_barrier_sync(kStaggerBarrier, 256);
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
}

// Consumer warpgroup c: for each work tile of this block, the mainloop and
// the epilogue of rows 64c..64c+63. The producer keeps loading the next
// tile's first k-tiles while this runs the epilogue. kStreamK: this launch
// runs its last wave stream-K (see wgmma_gemm_kernel); stream_k_last: a word of
// shared memory of this warpgroup (finish_stream_k_segment).
template <class Cfg, bool kStreamK, class TileA, class TileB>
__device__ __forceinline__ void consume(const WgmmaParams& p, const CUtensorMap* map_c,
                                        TileA tile_a, TileB tile_b, uint8_t* epilogue_smem,
                                        uint64_t* full, uint64_t* empty, uint64_t* full_b,
                                        uint64_t* empty_b, uint32_t rank,
                                        int c, int lane, uint32_t* stream_k_last) {
  // Frees pipeline slot `it` in every block of the cluster (each holds our
  // multicast B slice there) once this warp's MMAs on it completed; with
  // kOwnStagesB, B's slot too.
  auto release = [&](uint32_t it) {
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
  // Pipeline slot counter, continuous across work tiles. Unsigned, so the
  // slot (it % kStages) and phase (it / kStages) need no sign fix-ups.
  uint32_t it = 0;
  const int64_t cluster = blockIdx.x / Cfg::kClusterM, clusters = gridDim.x / Cfg::kClusterM;
  const int64_t items = cluster_items<Cfg, kStreamK>(p, cluster, clusters);
  for (int64_t item = 0; item < items; ++item) {
    const WorkTile tile = cluster_work<Cfg, kStreamK>(p, cluster, clusters, item, rank);
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
    if constexpr (Cfg::kSplit3)
      split3_mainloop<Cfg>(tile, item == 0, it, full, load_fragments, release, promote_acc, tile_b, c, acc);
    else if constexpr (Cfg::kSwapAB)
      rs_mainloop<Cfg>(tile, k_tile, load_fragments, tile_b, acc);
    else
      ss_mainloop<Cfg>(tile, k_tile, tile_a, tile_b, c, acc);
    ptx::wgmma_wait_group<0>();  // unconditional: ptxas must see it before acc is read
    if (!previous_released) release(it - 1);
#pragma unroll
    for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[i]);

    if constexpr (kStreamK) {
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

// kStreamK: this launch runs its last wave stream-K (p.stream_k_iters > 0).
// A kernel of its own: with the stream-K code (the schedule's index math,
// finish_stream_k_segment) in the same kernel, even behind a branch, ptxas
// no longer kept the pipeline counter and barrier addresses on the uniform
// datapath and the producer's TMA loop spilled (WgmmaSquare: 12 -> 96
// bytes; the whole-tiles kernel now 44); 4095x4097x4099 ran 12% slower than before stream-K (H200,
// 2026-12-02, builds timed alternately: 461-477 -> 534-541 us). With the
// kernels apart: 487-501 against 516-540 us in the same runs; the
// stream-K shapes and 4096^3 unchanged within the runs' spread.
template <class Cfg, bool kStreamK>
__global__ void PYGPUKIT_CLUSTER_DIMS(Cfg::kClusterM) __launch_bounds__(Cfg::kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap map_a,
                      const __grid_constant__ CUtensorMap map_b,
                      const __grid_constant__ CUtensorMap map_c, const WgmmaParams p) {
  static_assert(!kStreamK || Cfg::kPromoteKTiles == 0, "stream-K adds unpromoted sums");
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
      uint32_t it = 0;
      const int64_t cluster = blockIdx.x / Cfg::kClusterM, clusters = gridDim.x / Cfg::kClusterM;
      const int64_t items = cluster_items<Cfg, kStreamK>(p, cluster, clusters);
      for (int64_t item = 0; item < items; ++item) {
        const WorkTile tile = cluster_work<Cfg, kStreamK>(p, cluster, clusters, item, rank);
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
      walk([&](uint32_t it, const WorkTile& tile, int kt) {
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
      walk([&](uint32_t it, const WorkTile& tile, int kt) {
        const int sb = it % Cfg::kStagesB;
        ptx::mbarrier_wait(&empty_b[sb], ((it / Cfg::kStagesB) & 1) ^ 1);
        ptx::mbarrier_arrive_expect_tx(&full_b[sb], p.stage_tx_bytes_b);
        load_b(tile_b(sb), &full_b[sb], tile, kt);
      });
    }
  } else {
    ptx::setmaxnreg_inc<232>();
    const int c = warpgroup - 1;
    uint32_t* stream_k_last = nullptr;
    if constexpr (kStreamK) {
      __shared__ uint32_t last[Cfg::kConsumers];
      stream_k_last = &last[c];
    }
    consume<Cfg, kStreamK>(p, &map_c, tile_a, tile_b,
                           epilogue_smem + c * 2 * Cfg::kEpilogueBufferBytes, full, empty, full_b,
                           empty_b, rank, c, lane, stream_k_last);
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



// What wgmma_gemm_kernel<Cfg, kStreamK> asks of the device, for either
// variant: its shared memory and the residency query of its clusters.
template <class Cfg>
constexpr KernelNeeds kernel_needs() {
  return KernelNeeds{Cfg::kSmemBytes, Cfg::kThreads, Cfg::kClusterM};
}

// The persistent grid's clusters for `works` work items: one per resident
// slot, at most one per item. The residency of the whole-tiles kernel,
// which the stream-K one shares (same threads, dynamic shared memory and
// launch bounds; its 8-16 bytes of static shared memory more change nothing
// at one block per SM).
template <class Cfg>
cudaError_t grid_clusters(int64_t works, int64_t* clusters) {
  KernelReady ready;
  const cudaError_t err = prepare_kernel<wgmma_gemm_kernel<Cfg, false>>(kernel_needs<Cfg>(), &ready);
  if (err != cudaSuccess) return err;
  *clusters = std::min<int64_t>(works, ready.resident_clusters);
  return cudaSuccess;
}

// The problem as the kernel runs it: C^T = B^T A^T under kSwapAB.
template <class Cfg>
int64_t kernel_m(const GemmProblem& p) { return Cfg::kSwapAB ? p.N : p.M; }
template <class Cfg>
int64_t kernel_n(const GemmProblem& p) { return Cfg::kSwapAB ? p.M : p.N; }

// Whether each tile of the weight (the caller's B) is loaded by one block
// only, once: all M rows of A fit in one tile and no other batch entry
// shares B. Then its TMA loads are marked L2 evict-first, so that the
// streamed weight need not push out of L2 what is read again: the
// activations (read by every block) and the split-K partials (read back by
// the reduction). H200, 2026-12-02, in one process, without -> with:
// split-K shapes at K = 4096 0.4-2.4 us faster (M = 128, 4096^2: x @ W.T
// 29.8 -> 27.4, x @ W 29.3 -> 27.3), at K = 14336 x @ W.T 1.1-2.0 (M = 64,
// 14336 -> 4096: 67.7 -> 65.7), x @ W within noise; unsplit shapes within
// 1 us either way (4096 -> 14336). Marking x evict-last as well gained
// nothing. (Under kClusterM > 1 without kSwapAB, B arrives by
// tma_load_3d_multicast, which passes no hint.)
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
  if (!encoded) return step_result(cudaErrorInvalidValue, "encoding the operands' tensor maps");
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
    if (splitk_partials_bytes(splits, p.M, p.N) > partials_bytes)
      return step_result(cudaErrorInvalidValue, "workspace too small for the split-K partials");
    params.C = partials;
    params.ldc = ldp;
    params.batch_stride_c = p.M * ldp;
    params.epilogue = Epilogue{};
    params.tma_store = encode_matrix(&map_c, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, partials, p.M, p.N,
                                     ldp, splits, p.M * ldp, Cfg::kStoreBoxRows);
    if (!params.tma_store) return step_result(cudaErrorInvalidValue, "encoding the partials' tensor map");
  } else {
    params.tma_store = tma_compatible(p.C, p.M, p.ldc, p.batch, p.batch_stride_c) &&
                       encode_matrix(&map_c, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.C, p.M, p.N,
                                     p.ldc, p.batch, p.batch_stride_c, Cfg::kStoreBoxRows);
  }
  // Persistent: one cluster per resident slot, each walking the work items.
  int64_t clusters = 0;
  cudaError_t err = wgmma_detail::grid_clusters<Cfg>(wgmma_detail::work_count<Cfg>(params), &clusters);
  if (err != cudaSuccess) return step_result(err, "setting the kernel up");
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
      if (err != cudaSuccess) return step_result(err, "clearing the stream-K counters");
    }
  }
  // Programmatic dependent launch: the launch and prologue overlap the
  // previous kernel's tail, and the reduction's launch overlaps ours.
  auto launch = [&](auto stream_k) {
    constexpr bool kStreamK = decltype(stream_k)::value;
    return launch_kernel<wgmma_detail::wgmma_gemm_kernel<Cfg, kStreamK>>(
        dim3(unsigned(clusters * Cfg::kClusterM)), dim3(Cfg::kThreads),
        wgmma_detail::kernel_needs<Cfg>(), stream, map_a, map_b, map_c, params);
  };
  if constexpr (Cfg::kPromoteKTiles == 0)
    err = params.stream_k_iters > 0 ? launch(std::true_type{}) : launch(std::false_type{});
  else err = launch(std::false_type{});
  // launch_kernel names its own failed step (launch_util.h).
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
