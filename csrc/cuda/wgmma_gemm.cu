// The Hopper TF32 GEMM: TMA copies into 128-byte-swizzled shared memory,
// warp-specialized into one producer warpgroup (TMA) and BM / 64 consumer
// warpgroups (wgmma), with full/empty mbarrier pairs per pipeline stage.
// TF32 rounding is free: the tensor maps declare the data TFLOAT32, so TMA
// rounds each element to nearest while copying it (the approach of CUTLASS's
// sm90 TF32 kernels; see docs/tf32_tensorcore_design.md).
#include <atomic>
#include <mutex>

#include <cuda.h>

#include "epilogue.cuh"
#include "launch_util.h"
#include "ptx_sm90.cuh"
#include "tile_raster.cuh"
#include "wgmma_config.h"

namespace pygpukit {
namespace {

constexpr int64_t kGroupM = 8;  // grouped rasterization (tile_raster.cuh)

struct WgmmaParams {
  int64_t M, N, K, batch;
  float* C;
  int64_t ldc, batch_stride_c;
  Epilogue epilogue;
  // Batch coordinate multiplier of each tensor map: 1, or 0 for an operand
  // broadcast over the batch.
  int batch_step_a, batch_step_b;
};

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap map_a,
                      const __grid_constant__ CUtensorMap map_b, const WgmmaParams p) {
#if PYGPUKIT_SM90A_DEVICE
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  // Stage s: A tile [BM][BK] then B tile [BN][BK], both K-major, swizzled.
  auto tile_a = [&](int s) { return smem + s * Cfg::kStageBytes; };
  auto tile_b = [&](int s) { return smem + s * Cfg::kStageBytes + Cfg::kStageBytesA; };
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + Cfg::kStages * Cfg::kStageBytes);
  uint64_t* const empty = full + Cfg::kStages;

  const int warpgroup = threadIdx.x / 128;
  const int lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);                     // the producer's expect_tx
      ptx::mbarrier_init(&empty[s], Cfg::kConsumers * 4);  // every consumer warp
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();

  const int64_t tiles_m = ceil_div(p.M, Cfg::BM), tiles_n = ceil_div(p.N, Cfg::BN);
  const TileCoord tile = grouped_tile<kGroupM>(blockIdx.x, tiles_m, tiles_n);
  const int64_t m0 = tile.m * Cfg::BM, n0 = tile.n * Cfg::BN;
  const int k_tiles = int(ceil_div(p.K, Cfg::BK));

  if (warpgroup == 0) {
    // Producer: one thread walks the k-tiles of every batch entry, refilling
    // a stage as soon as all consumer warps released it.
    if (threadIdx.x != 0) return;
    int it = 0;  // pipeline slot counter, continuous across batch entries
    for (int64_t b = blockIdx.y; b < p.batch; b += gridDim.y) {
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const int s = it % Cfg::kStages;
        // Waits for the consumers to free slot s; the first pass over the
        // slots waits on the phase "before" a fresh barrier, which counts
        // as completed.
        ptx::mbarrier_wait(&empty[s], ((it / Cfg::kStages) & 1) ^ 1);
        ptx::mbarrier_arrive_expect_tx(&full[s], Cfg::kStageBytes);
        ptx::tma_load_3d(tile_a(s), &map_a, &full[s], kt * Cfg::BK, int(m0),
                         int(b * p.batch_step_a));
        ptx::tma_load_3d(tile_b(s), &map_b, &full[s], kt * Cfg::BK, int(n0),
                         int(b * p.batch_step_b));
      }
    }
    return;
  }

  // Consumer warpgroup c owns rows 64c..64c+63 of the tile.
  const int c = warpgroup - 1;
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
  int it = 0;
  for (int64_t b = blockIdx.y; b < p.batch; b += gridDim.y) {
    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      const int s = it % Cfg::kStages;
      ptx::mbarrier_wait(&full[s], (it / Cfg::kStages) & 1);
      const uint32_t a0 = ptx::smem_addr(tile_a(s)) + c * 64 * 128;
      const uint32_t b0 = ptx::smem_addr(tile_b(s));
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Cfg::BK / 8; ++kk) {
        // The first k8 step of a tile overwrites what the previous batch
        // entry left in the accumulators.
        ptx::wgmma_m64n256k8_tf32(acc, ptx::smem_desc_kmajor_sw128(a0 + kk * 32),
                                  ptx::smem_desc_kmajor_sw128(b0 + kk * 32), kt > 0 || kk > 0);
      }
      ptx::wgmma_commit_group();
      // Keep this k-tile's MMAs in flight while releasing the previous
      // slot, whose MMAs are now complete.
      ptx::wgmma_wait_group<1>();
      if (kt > 0 && lane == 0) ptx::mbarrier_arrive(&empty[(it - 1) % Cfg::kStages]);
    }
    ptx::wgmma_wait_group<0>();
    if (lane == 0) ptx::mbarrier_arrive(&empty[(it - 1) % Cfg::kStages]);
#pragma unroll
    for (int i = 0; i < 128; ++i) ptx::fence_operand(acc[i]);

    // Epilogue straight from the accumulators (layout: ptx_sm90.cuh).
    float* const C = p.C + b * p.batch_stride_c;
    const bool pair_stores = pair_stores_aligned(C, p.ldc);
    const int warp = (threadIdx.x % 128) / 32, g = lane / 4, t = lane % 4;
    const int64_t row = m0 + c * 64 + warp * 16 + g;
#pragma unroll
    for (int j = 0; j < Cfg::BN / 8; ++j) {
      const int64_t col = n0 + j * 8 + 2 * t;
      store_pair(p.epilogue, C, p.ldc, p.M, p.N, row, col, acc[4 * j], acc[4 * j + 1],
                 pair_stores);
      store_pair(p.epilogue, C, p.ldc, p.M, p.N, row + 8, col, acc[4 * j + 2], acc[4 * j + 3],
                 pair_stores);
    }
  }
#else
  // Built without sm_90a: the dispatcher never launches this (see
  // PYGPUKIT_HAS_SM90A); trap rather than leave C unwritten.
  __trap();
#endif
}

// cuTensorMapEncodeTiled from the driver, found through the runtime so the
// extension needs no link against libcuda.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static EncodeTiled fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      ptr = nullptr;
    return reinterpret_cast<EncodeTiled>(ptr);
  }();
  return fn;
}

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// A K-major operand X[batch][rows][K] (element (r, k) at r * ld + k) as a
// 3-D tensor map with box [1][box_rows][32]. TFLOAT32 makes TMA round to
// nearest; out-of-bounds elements (M/N/K tails) are filled with zeros.
bool encode_operand(CUtensorMap* map, const float* ptr, int64_t rows, int64_t K, int64_t ld,
                    int64_t batch, int64_t batch_stride, int box_rows) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return false;
  // Strides TMA never follows (one row, one batch entry) still have to be
  // valid multiples of 16 bytes.
  const int64_t row_bytes = rows > 1 ? ld * 4 : round_up(K * 4, 16);
  const bool batched = batch > 1 && batch_stride != 0;
  const cuuint64_t dims[3] = {cuuint64_t(K), cuuint64_t(rows), cuuint64_t(batched ? batch : 1)};
  const cuuint64_t strides[2] = {cuuint64_t(row_bytes),
                                 cuuint64_t(batched ? batch_stride * 4 : row_bytes * rows)};
  const cuuint32_t box[3] = {32, cuuint32_t(box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32, 3, const_cast<float*>(ptr), dims, strides,
                box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

bool wgmma_operand_ready(const float* ptr, int64_t rows, int64_t ld, int64_t batch,
                         int64_t batch_stride) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && (rows == 1 || ld % 4 == 0) &&
         (batch == 1 || batch_stride % 4 == 0);
}

cudaError_t launch_wgmma_gemm(const GemmProblem& p, cudaStream_t stream) {
  using Cfg = WgmmaLarge;
  CUtensorMap map_a, map_b;
  if (!encode_operand(&map_a, p.A, p.M, p.K, p.lda, p.batch, p.batch_stride_a, Cfg::BM) ||
      !encode_operand(&map_b, p.B, p.N, p.K, p.ldb, p.batch, p.batch_stride_b, Cfg::BN))
    return cudaErrorInvalidValue;
  const WgmmaParams params{p.M,   p.N,       p.K,       p.batch,
                           p.C,   p.ldc,     p.batch_stride_c, p.epilogue,
                           p.batch_stride_a != 0, p.batch_stride_b != 0};
  auto kernel = wgmma_gemm_kernel<Cfg>;
  static std::atomic<uint64_t> smem_configured{0};
  cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes,
                                       smem_configured);
  if (err != cudaSuccess) return err;
  const dim3 grid(unsigned(Cfg::tiles(p.M, p.N)), unsigned(p.batch < 65535 ? p.batch : 65535));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(map_a, map_b, params);
  return cudaGetLastError();
}

}  // namespace pygpukit
