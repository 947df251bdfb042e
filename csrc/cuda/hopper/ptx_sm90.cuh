// Inline-PTX building blocks of the Hopper (sm_90a) path: mbarriers, TMA
// tensor copies, and warpgroup MMA (wgmma) with shared-memory descriptors.
// Section numbers refer to the CUDA 13.0 PTX ISA manual. Every function here
// compiles only for sm_90a (the `a` features: wgmma, setmaxnreg); the callers
// guard their bodies with PYGPUKIT_SM90A_DEVICE.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "cuda/common/ptx.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PYGPUKIT_SM90A_DEVICE 1
#else
#define PYGPUKIT_SM90A_DEVICE 0
#endif

namespace pygpukit::ptx {

#if PYGPUKIT_SM90A_DEVICE

// ---- mbarrier (9.7.13.15) -------------------------------------------------

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}

// Makes the initialized barriers visible to the async proxy (TMA) before use.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives and announces `bytes` that TMA copies will deliver to this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

// Arrives on the barrier at the same shared-memory offset as `bar` in the
// block of cluster rank `cta` (possibly this block). Default (CTA-scope)
// semantics on purpose: `.release.cluster` compiles to MEMBAR.ALL.GPU before
// the arrive, which cost the H200 a third of its throughput here; what the
// barrier orders are wgmma reads of shared memory that wgmma.wait_group has
// already retired.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(cta)
      : "memory");
}

// Blocks until the phase of parity `phase` of `bar` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t phase) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(phase)
      : "memory");
}

// ---- thread block clusters (9.7.13.4, 10.10) -------------------------------

__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// Every thread of every block of the cluster: barrier with release/acquire
// semantics, so what a block wrote to shared memory before (initialized
// barriers) is visible to its peers after.
__device__ __forceinline__ void cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}

// ---- TMA (9.7.9.25.5.1) -----------------------------------------------------

// Copies the box at coordinates (c0, c1, c2) of the 3-D tensor map `map` to
// shared memory at `dst`, completing the box's bytes on `bar` (armed with
// their count by mbarrier_arrive_expect_tx). Out-of-bounds elements are
// zero-filled (and still counted in the transaction bytes). A nonzero
// `l2_policy` (from l2_policy_evict_first) is the copy's L2 cache hint
// (.L2::cache_hint); 0 leaves L2's default (evict-normal).
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar,
                                            int32_t c0, int32_t c1, int32_t c2,
                                            uint64_t l2_policy = 0) {
  if (l2_policy != 0) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".L2::cache_hint [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar)),
        "l"(l2_policy)
        : "memory");
    return;
  }
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

// The same copy delivered to the same shared-memory offset in every block of
// the cluster whose rank bit is set in `cta_mask`, completing the box's bytes
// on each one's barrier at the offset of `bar`.
__device__ __forceinline__ void tma_load_3d_multicast(void* dst, const CUtensorMap* map,
                                                      uint64_t* bar, uint16_t cta_mask,
                                                      int32_t c0, int32_t c1, int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar)),
      "h"(cta_mask)
      : "memory");
}

// Copies the box at (c0, c1, c2) of `map` from shared memory at `src` to
// global memory (elements outside the tensor are not written), as one bulk
// async-group of this thread.
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* src, int32_t c0,
                                             int32_t c1, int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(src))
      : "memory");
}

__device__ __forceinline__ void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's bulk groups still read shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Waits until all of this thread's bulk groups completed (writes included).
__device__ __forceinline__ void bulk_wait_group_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// Makes this thread's generic-proxy shared-memory writes visible to the async
// proxy (TMA, wgmma) (9.7.13.4.5).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// counter += value at GPU scope with acquire-release semantics (9.7.13.5):
// it releases the writes this thread observed before it (through a
// barrier, those of its peers) and acquires those released by the adds
// before it. Returns the old value.
__device__ __forceinline__ uint32_t atom_add_acq_rel_gpu(uint32_t* counter, uint32_t value) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n"
               : "=r"(old)
               : "l"(counter), "r"(value)
               : "memory");
  return old;
}

// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at barrier `id` without waiting (9.7.13.1): the threads that
// bar.sync on it wait for these too.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// A 32-bit load from shared memory at byte address `addr` (9.7.9.8). Spelled
// out because a pointer that reached the kernel's shared memory through a
// lambda compiles to a generic load; volatile keeps it after the mbarrier
// wait that made the data visible.
__device__ __forceinline__ uint32_t ld_shared_b32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

// ---- register reallocation (9.7.17.1) ---------------------------------------

// Shrinks / grows this warpgroup's per-thread register allocation to N, so
// the TMA producer's unused registers go to the consumers' accumulators.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- warpgroup MMA (9.7.15) --------------------------------------------------

// Shared-memory matrix descriptor (9.7.15.5.1) of a K-major tile stored with
// the 128-byte swizzle, as TMA writes it with CU_TENSOR_MAP_SWIZZLE_128B:
// rows of 128 bytes (32 tf32), 8-row groups 1024 bytes apart (the stride
// byte offset); the leading byte offset is unused for swizzled K-major
// layouts. `addr` must lie in a 1024-byte aligned tile, so the base offset
// field stays 0. Advancing along K by k8 (32 bytes) inside the swizzle atom
// adds 32 to `addr`: the hardware applies the swizzle to the final address.
__device__ __forceinline__ uint64_t smem_desc_kmajor_sw128(uint32_t addr) {
  constexpr uint64_t kLeadingByteOffset = 16 >> 4;
  constexpr uint64_t kStrideByteOffset = 1024 >> 4;
  constexpr uint64_t kSwizzle128B = 1;
  return uint64_t((addr & 0x3FFFF) >> 4) | (kLeadingByteOffset << 16) |
         (kStrideByteOffset << 32) | (kSwizzle128B << 62);
}

// The descriptor of the operand `bytes` further on in shared memory: its
// start address field (bits 0-13, address / 16) advanced. Every shared
// memory address fits the field (< 256 KB), so the add never carries out of
// it, and a 32-bit add on the low word suffices (a 64-bit one costs a carry
// chain per descriptor).
__device__ __forceinline__ uint64_t smem_desc_advance(uint64_t desc, uint32_t bytes) {
  return (desc & ~uint64_t{0xFFFFFFFFu}) | (uint32_t(desc) + (bytes >> 4));
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most N committed wgmma groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Pins an accumulator register at this point of the program: the compiler
// must not move reads or writes of `r` across it. wgmma writes its
// accumulators asynchronously, which the compiler cannot see.
__device__ __forceinline__ void fence_operand(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}
// The same for a register A fragment: its value is final here, so the
// compiler must not finish computing it after the wgmma.fence that
// precedes the MMAs reading it.
__device__ __forceinline__ void fence_operand(uint32_t& r) {
  asm volatile("" : "+r"(r)::"memory");
}

// The accumulator operands of wgmma.m64n64k8 (%0..%31, 32 per thread),
// m64n128k8 (%0..%63) and m64n256k8 (%0..%127), the operands with
// constraint c ("+f" for FP32 accumulators, "+r" for INT32 ones), shared by
// the SS and RS wrappers; each list is the one before followed by as many
// more.
#define PYGPUKIT_WGMMA_ACC32_LIST \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define PYGPUKIT_WGMMA_ACC32_OPERANDS_AS(c, d) \
    c(d[0]), c(d[1]), c(d[2]), c(d[3]), c(d[4]), c(d[5]), c(d[6]), c(d[7]), \
    c(d[8]), c(d[9]), c(d[10]), c(d[11]), c(d[12]), c(d[13]), c(d[14]), c(d[15]), \
    c(d[16]), c(d[17]), c(d[18]), c(d[19]), c(d[20]), c(d[21]), c(d[22]), c(d[23]), \
    c(d[24]), c(d[25]), c(d[26]), c(d[27]), c(d[28]), c(d[29]), c(d[30]), c(d[31])
#define PYGPUKIT_WGMMA_ACC64_LIST \
    PYGPUKIT_WGMMA_ACC32_LIST ", " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PYGPUKIT_WGMMA_ACC64_OPERANDS_AS(c, d) \
    PYGPUKIT_WGMMA_ACC32_OPERANDS_AS(c, d), \
    c(d[32]), c(d[33]), c(d[34]), c(d[35]), c(d[36]), c(d[37]), c(d[38]), c(d[39]), \
    c(d[40]), c(d[41]), c(d[42]), c(d[43]), c(d[44]), c(d[45]), c(d[46]), c(d[47]), \
    c(d[48]), c(d[49]), c(d[50]), c(d[51]), c(d[52]), c(d[53]), c(d[54]), c(d[55]), \
    c(d[56]), c(d[57]), c(d[58]), c(d[59]), c(d[60]), c(d[61]), c(d[62]), c(d[63])
#define PYGPUKIT_WGMMA_ACC128_LIST \
    PYGPUKIT_WGMMA_ACC64_LIST ", " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define PYGPUKIT_WGMMA_ACC128_OPERANDS_AS(c, d) \
    PYGPUKIT_WGMMA_ACC64_OPERANDS_AS(c, d), \
    c(d[64]), c(d[65]), c(d[66]), c(d[67]), c(d[68]), c(d[69]), c(d[70]), c(d[71]), \
    c(d[72]), c(d[73]), c(d[74]), c(d[75]), c(d[76]), c(d[77]), c(d[78]), c(d[79]), \
    c(d[80]), c(d[81]), c(d[82]), c(d[83]), c(d[84]), c(d[85]), c(d[86]), c(d[87]), \
    c(d[88]), c(d[89]), c(d[90]), c(d[91]), c(d[92]), c(d[93]), c(d[94]), c(d[95]), \
    c(d[96]), c(d[97]), c(d[98]), c(d[99]), c(d[100]), c(d[101]), c(d[102]), c(d[103]), \
    c(d[104]), c(d[105]), c(d[106]), c(d[107]), c(d[108]), c(d[109]), c(d[110]), c(d[111]), \
    c(d[112]), c(d[113]), c(d[114]), c(d[115]), c(d[116]), c(d[117]), c(d[118]), c(d[119]), \
    c(d[120]), c(d[121]), c(d[122]), c(d[123]), c(d[124]), c(d[125]), c(d[126]), c(d[127])
// The operand lists with FP32 accumulators ("+f").
#define PYGPUKIT_WGMMA_ACC32_OPERANDS(d) PYGPUKIT_WGMMA_ACC32_OPERANDS_AS("+f", d)
#define PYGPUKIT_WGMMA_ACC64_OPERANDS(d) PYGPUKIT_WGMMA_ACC64_OPERANDS_AS("+f", d)
#define PYGPUKIT_WGMMA_ACC128_OPERANDS(d) PYGPUKIT_WGMMA_ACC128_OPERANDS_AS("+f", d)

// D[64x256] = A[64x8] * B[8x256] + (accumulate ? D : 0) for one warpgroup, TF32 inputs, FP32
// accumulators, both operands K-major in shared memory (the only layout TF32
// wgmma accepts). Accumulator layout: warp w of the warpgroup holds rows
// 16w..16w+15; within it, d[4j + 0..1] = (row g, cols 8j + 2t, +1) and
// d[4j + 2..3] = (row g + 8, same cols), g = lane / 4, t = lane % 4.
__device__ __forceinline__ void wgmma_m64n256k8_tf32(float (&d)[128], uint64_t desc_a,
                                                     uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {"
      PYGPUKIT_WGMMA_ACC128_LIST
      "}, %128, %129, scale_d, 1, 1;\n"
      "}\n"
      :
        PYGPUKIT_WGMMA_ACC128_OPERANDS(d)
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
}

// The same for a 64 x 128 tile: 64 accumulators per thread (configurations
// that keep a second set of accumulators, see WgmmaConfig::kPromoteKTiles).
__device__ __forceinline__ void wgmma_m64n128k8_tf32(float (&d)[64], uint64_t desc_a,
                                                     uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
      PYGPUKIT_WGMMA_ACC64_LIST
      "}, %64, %65, scale_d, 1, 1;\n"
      "}\n"
      :
        PYGPUKIT_WGMMA_ACC64_OPERANDS(d)
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
}

// D[64x256] = A[64x8] * B[8x256] + (accumulate ? D : 0) with A from registers
// (the RS form, 9.7.15.5): a[0..3] of warp w of the warpgroup hold A's
// elements (16w + g, t), (16w + g + 8, t), (16w + g, t + 4), (16w + g + 8, t + 4),
// g = lane / 4, t = lane % 4 (CuTe's ALayout_64x8 for 32-bit types); B is
// K-major in shared memory as for wgmma_m64n256k8_tf32. The A registers must
// stay unchanged until the wgmma completes (wgmma.wait_group): that is the
// caller's job, ptxas does not enforce it. Values are used as TF32 (the low
// 13 mantissa bits ignored), so they must already be rounded.
__device__ __forceinline__ void wgmma_m64n256k8_tf32_rs(float (&d)[128], const uint32_t (&a)[4],
                                                        uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {"
      PYGPUKIT_WGMMA_ACC128_LIST
      "}, {%128, %129, %130, %131}, %132, scale_d, 1, 1;\n"
      "}\n"
      :
        PYGPUKIT_WGMMA_ACC128_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)));
}

// The same for a 64 x 64 tile.
__device__ __forceinline__ void wgmma_m64n64k8_tf32_rs(float (&d)[32], const uint32_t (&a)[4],
                                                       uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
      PYGPUKIT_WGMMA_ACC32_LIST
      "}, {%32, %33, %34, %35}, %36, scale_d, 1, 1;\n"
      "}\n"
      :
        PYGPUKIT_WGMMA_ACC32_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)));
}

// The same for a 64 x 128 tile.
__device__ __forceinline__ void wgmma_m64n128k8_tf32_rs(float (&d)[64], const uint32_t (&a)[4],
                                                        uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
      PYGPUKIT_WGMMA_ACC64_LIST
      "}, {%64, %65, %66, %67}, %68, scale_d, 1, 1;\n"
      "}\n"
      :
        PYGPUKIT_WGMMA_ACC64_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)));
}


// D[64x256] = A[64x32] * B[32x256] + (accumulate ? D : 0) for one warpgroup,
// INT8 inputs, INT32 accumulators, both operands K-major in shared memory
// (the only layout 8-bit wgmma accepts) with the 128-byte swizzle: rows of
// 128 int8, so each k32 step advances the descriptors by 32 bytes, as a k8
// step of TF32 does. The accumulators wrap modulo 2^32 (no .satfinite), and
// lie in registers as for wgmma_m64n256k8_tf32.
__device__ __forceinline__ void wgmma_m64n256k32_s8(int32_t (&d)[128], uint64_t desc_a,
                                                    uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {"
      PYGPUKIT_WGMMA_ACC128_LIST
      "}, %128, %129, scale_d;\n"
      "}\n"
      :
        PYGPUKIT_WGMMA_ACC128_OPERANDS_AS("+r", d)
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
}

// fence_operand for an INT32 accumulator.
__device__ __forceinline__ void fence_operand(int32_t& r) {
  asm volatile("" : "+r"(r)::"memory");
}

// wgmma.m64n{N}k8 TF32 for the tile widths the configurations use.
template <int N>
__device__ __forceinline__ void wgmma_tf32(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                           bool accumulate) {
  static_assert(N == 128 || N == 256, "no wrapper for this wgmma width");
  if constexpr (N == 256) wgmma_m64n256k8_tf32(d, desc_a, desc_b, accumulate);
  else wgmma_m64n128k8_tf32(d, desc_a, desc_b, accumulate);
}

// The RS form of wgmma.m64n{N}k8 TF32 (A from registers).
template <int N>
__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[N / 2], const uint32_t (&a)[4],
                                              uint64_t desc_b, bool accumulate) {
  static_assert(N == 64 || N == 128 || N == 256, "no wrapper for this wgmma width");
  if constexpr (N == 256) wgmma_m64n256k8_tf32_rs(d, a, desc_b, accumulate);
  else if constexpr (N == 128) wgmma_m64n128k8_tf32_rs(d, a, desc_b, accumulate);
  else wgmma_m64n64k8_tf32_rs(d, a, desc_b, accumulate);
}

#endif  // PYGPUKIT_SM90A_DEVICE

}  // namespace pygpukit::ptx
