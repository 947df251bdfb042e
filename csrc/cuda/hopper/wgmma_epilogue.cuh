// The Hopper GEMM's epilogue (wgmma_gemm.cuh): each consumer warpgroup's
// accumulators through swizzled shared-memory buffers to C, with bias and
// activation applied in the buffer, stored by TMA or copied out by the
// warpgroup; store_tile_transposed for the SwapAB configurations, whose
// accumulators hold C^T.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "cuda/common/epilogue.cuh"
#include "cuda/hopper/ptx_sm90.cuh"
#include "cuda/hopper/wgmma_schedule.cuh"

namespace pygpukit {
namespace wgmma_detail {

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
#endif

}  // namespace wgmma_detail
}  // namespace pygpukit
