// The INT8 tensor-core GEMMs of the FP32-accurate product: for each modulus
// p_l in use, C_l = (A_l B_l^T) mod p_l from the residue planes that
// split_kernel wrote (both K-major), on Hopper's wgmma.
#include "cuda/ozaki/ozaki_kernels.h"

#include "cuda/common/int_math.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tile_raster.cuh"
#include "cuda/hopper/ptx_sm90.cuh"
#include "cuda/hopper/tensor_map.h"
#include "cuda/launch_util.h"

namespace pygpukit::ozaki {
namespace {

// Threadblock tile BM x BN x BK (BK int8: one 128-byte swizzle atom) in a
// kStages-deep TMA pipeline; one producer warpgroup, BM / 64 consumer
// warpgroups issuing wgmma.m64n256k32 on 64 rows each. 48 KB per stage.
struct Int8GemmConfig {
  static constexpr int BM = 128, BN = 256, BK = 128, kStages = 4;
  static constexpr int kConsumers = BM / 64, kThreads = 128 * (1 + kConsumers);
  static constexpr int kStageBytesA = BM * BK, kStageBytesB = BN * BK;
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  // Stages, full and empty mbarriers, and slack to align the stages to the
  // 1024 bytes the swizzle pattern repeats over.
  static constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;
  // k-tiles of one INT32 accumulation (kChunkK of K).
  static constexpr int kChunkTiles = int(kChunkK / BK);
  static_assert(kStageBytesA % 1024 == 0 && kStageBytesB % 1024 == 0, "stages stay 1024-byte aligned");
  static_assert(kChunkTiles * BK == kChunkK, "a chunk is whole k-tiles");
  static_assert(kSmemBytes <= 227 * 1024, "the stages do not fit");
};

using Cfg = Int8GemmConfig;

// Block (blockIdx.x, blockIdx.y): the tile of C that the grouped order
// gives its linear index (groups of kGroupM tile rows, so that the blocks
// resident at once share panels of A's and B's residues in L2: one
// modulus's planes are 64 MB each at 8192^3), for modulus l and batch entry
// b, blockIdx.z = l * batch + b. Blocks of a modulus past *count exit at
// once. The residue planes come through the tensor maps (p.a and p.b are
// not read here).
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    int8_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     const Int8Gemm p) {
#if PYGPUKIT_SM90A_DEVICE
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  auto tile_a = [smem](int s) { return smem + s * Cfg::kStageBytes; };
  auto tile_b = [smem](int s) { return smem + s * Cfg::kStageBytes + Cfg::kStageBytesA; };
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + Cfg::kStages * Cfg::kStageBytes);
  uint64_t* const empty = full + Cfg::kStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);                      // the producer's expect_tx
      ptx::mbarrier_init(&empty[s], Cfg::kConsumers * 4);   // every consumer warp
    }
    ptx::fence_barrier_init();
  }
  ptx::programmatic_launch_start();
  const int l = blockIdx.z / p.batch, b = blockIdx.z % p.batch;
  // Uniform per block, before any barrier is used. A count past n_max: the
  // reconstruction computes every product from the inputs instead.
  if (l >= *p.count || *p.count > p.n_max) return;
  __syncthreads();
  constexpr int64_t kGroupM = 8;
  const TileCoord tile = grouped_tile<kGroupM>(int64_t(blockIdx.y) * gridDim.x + blockIdx.x, gridDim.y, gridDim.x);
  const int m0 = int(tile.m) * Cfg::BM, n0 = int(tile.n) * Cfg::BN;
  const int k_tiles = int(ceil_div(p.K, Cfg::BK));
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      const int za = l * p.batch_a + (p.batch_a > 1 ? b : 0);
      const int zb = l * p.batch_b + (p.batch_b > 1 ? b : 0);
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % Cfg::kStages;
        // The first pass waits on the phase before a fresh barrier's, which counts as complete.
        ptx::mbarrier_wait(&empty[s], ((kt / Cfg::kStages) & 1) ^ 1);
        ptx::mbarrier_arrive_expect_tx(&full[s], Cfg::kStageBytes);
        ptx::tma_load_3d(tile_a(s), &map_a, &full[s], kt * Cfg::BK, m0, za);
        ptx::tma_load_3d(tile_b(s), &map_b, &full[s], kt * Cfg::BK, n0, zb);
      }
    }
    return;
  }
  ptx::setmaxnreg_inc<232>();
  const int c = warpgroup - 1, lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const int modulus = device_tables.moduli.p[l];
  const double modulus_inv = device_tables.moduli.p_inv[l];
  auto release = [&](int kt) {
    if (lane == 0) ptx::mbarrier_arrive_cluster(&empty[kt % Cfg::kStages], 0);
  };
  int32_t acc[Cfg::BN / 2];
#pragma unroll
  for (int i = 0; i < Cfg::BN / 2; ++i) acc[i] = 0;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % Cfg::kStages;
    ptx::mbarrier_wait(&full[s], (kt / Cfg::kStages) & 1);
    const uint64_t a0 = ptx::smem_desc_kmajor_sw128(ptx::smem_addr(tile_a(s)) + c * 64 * Cfg::BK);
    const uint64_t b0 = ptx::smem_desc_kmajor_sw128(ptx::smem_addr(tile_b(s)));
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Cfg::BK / 32; ++kk)
      ptx::wgmma_m64n256k32_s8(acc, ptx::smem_desc_advance(a0, kk * 32), ptx::smem_desc_advance(b0, kk * 32),
                               kt > 0 || kk > 0);
    ptx::wgmma_commit_group();
    // The previous k-tile's MMAs are done once at most this one's are pending.
    ptx::wgmma_wait_group<1>();
    if (kt > 0) release(kt - 1);
    if ((kt + 1) % Cfg::kChunkTiles == 0 && kt + 1 < k_tiles) {
      // Another kChunkK of K could overflow INT32: bring the sums below p.
      ptx::wgmma_wait_group<0>();
#pragma unroll
      for (int i = 0; i < Cfg::BN / 2; ++i) {
        ptx::fence_operand(acc[i]);
        acc[i] = residue(double(acc[i]), modulus, modulus_inv);
      }
    }
  }
  ptx::wgmma_wait_group<0>();
  release(k_tiles - 1);
#pragma unroll
  for (int i = 0; i < Cfg::BN / 2; ++i) ptx::fence_operand(acc[i]);
  // acc[4j + 2h + e] holds (row 16 warp + g + 8h, column 8j + 2t + e) of this
  // consumer's 64 rows; a pair of adjacent columns is one 2-byte store (ldc
  // is even; a column past N lands in the row's padding).
  const int g = lane / 4, t = lane % 4;
  int8_t* const out = p.c + int64_t(blockIdx.z) * p.M * p.ldc;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = m0 + 64 * c + 16 * warp + g + 8 * h;
    if (row >= p.M) continue;
#pragma unroll
    for (int j = 0; j < Cfg::BN / 8; ++j) {
      const int64_t col = n0 + 8 * j + 2 * t;
      if (col >= p.N) continue;
      const uint32_t lo = uint8_t(residue(double(acc[4 * j + 2 * h]), modulus, modulus_inv));
      const uint32_t hi = uint8_t(residue(double(acc[4 * j + 2 * h + 1]), modulus, modulus_inv));
      *reinterpret_cast<uint16_t*>(out + row * p.ldc + col) = uint16_t(lo | (hi << 8));
    }
  }
#else
  __trap();  // only sm_90a code can run this; ozaki_runs keeps other GPUs away
#endif
}

// A residue plane stack [planes][rows][ld] as a 3-D INT8 tensor map with box
// [1][box_rows][BK] and the 128-byte swizzle; rows and columns past the
// tensor load as zeros.
bool encode_planes(CUtensorMap* map, const int8_t* data, int64_t rows, int64_t K, int64_t ld,
                   int64_t planes, int box_rows) {
  const cuuint64_t dims[3] = {cuuint64_t(K), cuuint64_t(rows), cuuint64_t(planes)};
  const cuuint64_t strides[2] = {cuuint64_t(ld), cuuint64_t(ld * rows)};
  const cuuint32_t box[3] = {Cfg::BK, cuuint32_t(box_rows), 1};
  return encode_tensor_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, data, dims, strides, box);
}

}  // namespace

bool int8_gemm_available() {
#ifdef PYGPUKIT_HAS_SM90A
  return true;
#else
  return false;
#endif
}

cudaError_t launch_int8_gemm(const Int8Gemm& g, cudaStream_t stream) {
  CUtensorMap map_a, map_b;
  if (!encode_planes(&map_a, g.a, g.M, g.K, g.ld, int64_t(g.n_max) * g.batch_a, Cfg::BM) ||
      !encode_planes(&map_b, g.b, g.N, g.K, g.ld, int64_t(g.n_max) * g.batch_b, Cfg::BN))
    return step_result(cudaErrorInvalidValue, "encoding the INT8 GEMM's tensor maps");
  const dim3 grid(unsigned(ceil_div(g.N, Cfg::BN)), unsigned(ceil_div(g.M, Cfg::BM)),
                  unsigned(g.n_max * g.batch));
  KernelNeeds needs;
  needs.smem_bytes = Cfg::kSmemBytes;
  needs.threads = Cfg::kThreads;
  return launch_kernel<int8_gemm_kernel>(grid, dim3(Cfg::kThreads), needs, stream, map_a, map_b, g);
}

}  // namespace pygpukit::ozaki
