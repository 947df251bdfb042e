// The one place that decides which kernel and tile configuration runs a GEMM.
// Later paths (Hopper wgmma, split-K, 3xTF32) are added here.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <string>

#include "fma_gemm.h"
#include "gemm_problem.h"
#include "mma_sync_config.h"
#include "pack_kmajor.h"
#include "splitk_reduce.h"
#include "tensor_map.h"
#include "wgmma_config.h"

namespace pygpukit {
namespace {

struct DeviceInfo {
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int smem_per_block_optin = 0;  // bytes of dynamic shared memory a block may use
};

constexpr int kMaxDevices = 64;

// Read once per device: cudaDeviceGetAttribute is cheap but not free, and
// these never change for the life of the process.
const DeviceInfo& device_info(int device) {
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<DeviceInfo, kMaxDevices> info;
  std::call_once(once[device], [device] {
    DeviceInfo& d = info[device];
    cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device);
    cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, device);
    cudaDeviceGetAttribute(&d.smem_per_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                           device);
  });
  return info[device];
}

enum class Kernel {
  kWgmmaLarge, kWgmmaMedium, kWgmmaNarrow,
  kMmaSyncLarge, kMmaSyncMedium, kMmaSyncSmall,
  kFma
};

struct Choice {
  Kernel kernel;
  bool vec16 = false;  // 16-byte loads (mma_sync only)
  int splits = 1;      // split-K ranges (wgmma only)
};

bool is_wgmma(Kernel k) {
  return k == Kernel::kWgmmaLarge || k == Kernel::kWgmmaMedium || k == Kernel::kWgmmaNarrow;
}

// 16-byte cp.async needs every chunk start 16-byte aligned: the base pointer,
// the leading dimension and the batch stride (in floats) all multiples of 4.
bool aligned16(const float* ptr, int64_t ld, int64_t batch_stride) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && ld % 4 == 0 && batch_stride % 4 == 0;
}

template <class Config>
bool fits(const GemmProblem& p, const DeviceInfo& d) {
  return d.smem_per_block_optin >= mma_sync_smem_bytes<Config>(p.layout_a, p.layout_b);
}

// Whether `Config` fits the device's shared memory and gives every SM at
// least one threadblock.
template <class Config>
bool fits_and_fills(const GemmProblem& p, const DeviceInfo& d) {
  return fits<Config>(p, d) && Config::tiles(p.M, p.N) * p.batch >= d.sm_count;
}

// Whether this build holds the sm_90a kernel and the device can run it
// (exactly compute capability 9.0: sm_90a code runs on nothing else).
bool wgmma_available(const DeviceInfo& d) {
#ifdef PYGPUKIT_HAS_SM90A
  return d.cc_major == 9 && d.cc_minor == 0 && d.smem_per_block_optin >= WgmmaLarge::kSmemBytes;
#else
  (void)d;
  return false;
#endif
}

// Below this many multiply-adds the wgmma path's fixed costs (tensor map
// encoding, possible packing and reduction launches) outweigh its speed.
constexpr int64_t kWgmmaMinMacs = int64_t{1} << 24;

// The wgmma configuration for `p`: the tallest tile that M fills, and
// split-K when the output tiles alone would leave most SMs idle (decode-sized
// M, few large tiles), with at least 4 k-tiles (128 of K) per split.
template <class Config>
Choice wgmma_choice(Kernel kernel, const GemmProblem& p, const DeviceInfo& d) {
  const int64_t blocks = Config::tiles(p.M, p.N) * p.batch;
  const int64_t k_tiles = (p.K + Config::BK - 1) / Config::BK;
  int64_t splits = 1;
  if (p.batch == 1 && 2 * blocks <= d.sm_count)
    splits = std::min<int64_t>({d.sm_count / blocks, k_tiles / 4, 32});
  return {kernel, false, int(std::max<int64_t>(splits, 1))};
}

Choice choose_wgmma(const GemmProblem& p, const DeviceInfo& d) {
  if (p.M <= 64) return wgmma_choice<WgmmaNarrow>(Kernel::kWgmmaNarrow, p, d);
  if (p.M <= 128) return wgmma_choice<WgmmaMedium>(Kernel::kWgmmaMedium, p, d);
  return wgmma_choice<WgmmaLarge>(Kernel::kWgmmaLarge, p, d);
}

// PYGPUKIT_KERNEL forces a kernel family or configuration, for tests and
// benchmarks: auto (default), wgmma, mma_sync (the family, automatic tile),
// mma_sync_large, mma_sync_medium, mma_sync_small, fma. A forced kernel that
// cannot run the problem (wgmma off Hopper, large tile with unaligned
// operands, too little shared memory) falls back to the automatic choice
// rather than fail.
std::string forced_kernel() {
  const char* env = std::getenv("PYGPUKIT_KERNEL");
  return env ? env : "auto";
}

Choice choose(const GemmProblem& p, Precision precision, const DeviceInfo& d) {
  // mma.sync TF32 needs sm_80; FP32 precision never uses tensor cores.
  if (precision == Precision::kIEEE || d.cc_major < 8) return {Kernel::kFma};
  const bool vec16 = aligned16(p.A, p.lda, p.batch_stride_a) &&
                     aligned16(p.B, p.ldb, p.batch_stride_b);
  const std::string forced = forced_kernel();
  if (forced == "fma") return {Kernel::kFma};
  const bool wgmma = wgmma_available(d);
  if (forced == "wgmma" && wgmma) return choose_wgmma(p, d);
  if (forced == "mma_sync_large" && vec16 && fits<MmaSyncLarge>(p, d)) return {Kernel::kMmaSyncLarge, true};
  if (forced == "mma_sync_medium" && fits<MmaSyncMedium>(p, d)) return {Kernel::kMmaSyncMedium, vec16};
  if (forced == "mma_sync_small") return {Kernel::kMmaSyncSmall, vec16};
  // On Hopper, wgmma for everything but small problems.
  if (wgmma && forced == "auto" && p.M * p.N * p.K * p.batch >= kWgmmaMinMacs)
    return choose_wgmma(p, d);
  // The largest tile that still gives every SM work: larger tiles issue more
  // MMAs per fragment load and read less from L2 per FLOP. The large tile
  // has no 4-byte-load variant: its 12 scalar copies per thread and stage
  // would spill (ptxas: ~1 KB of spills per thread).
  if (vec16 && fits_and_fills<MmaSyncLarge>(p, d)) return {Kernel::kMmaSyncLarge, true};
  if (fits_and_fills<MmaSyncMedium>(p, d)) return {Kernel::kMmaSyncMedium, vec16};
  return {Kernel::kMmaSyncSmall, vec16};
}

template <class Config, bool kVec16>
cudaError_t launch_mma_sync_width(const GemmProblem& p, cudaStream_t stream) {
  using L = Layout;
  const bool a_row = p.layout_a == L::kRowMajor, b_row = p.layout_b == L::kRowMajor;
  if (a_row && b_row) return launch_mma_sync_gemm<Config, L::kRowMajor, L::kRowMajor, kVec16>(p, stream);
  if (a_row) return launch_mma_sync_gemm<Config, L::kRowMajor, L::kColMajor, kVec16>(p, stream);
  if (b_row) return launch_mma_sync_gemm<Config, L::kColMajor, L::kRowMajor, kVec16>(p, stream);
  return launch_mma_sync_gemm<Config, L::kColMajor, L::kColMajor, kVec16>(p, stream);
}

template <class Config>
cudaError_t launch_mma_sync(const GemmProblem& p, bool vec16, cudaStream_t stream) {
  return vec16 ? launch_mma_sync_width<Config, true>(p, stream)
               : launch_mma_sync_width<Config, false>(p, stream);
}

template <class Config>
std::string mma_sync_name() {
  using std::to_string;
  return "mma_sync " + to_string(Config::BM) + "x" + to_string(Config::BN) + "x" +
         to_string(Config::BK) + " warp " + to_string(Config::WM) + "x" + to_string(Config::WN) +
         " stages " + to_string(Config::kStages);
}

const char* layout_name(Layout l) { return l == Layout::kRowMajor ? "row-major" : "column-major"; }

int current_device() {
  int device = 0;
  cudaGetDevice(&device);
  return device;
}

// How the wgmma path gets its operands K-major and TMA-aligned: in place, or
// through a packed copy in the workspace (a transposed A or row-major B, or a
// leading dimension / base pointer that is not 16-byte aligned).
// Also where split-K's partial products go.
struct WgmmaPlan {
  bool pack_a = false, pack_b = false;
  int64_t batch_a = 1, batch_b = 1;  // entries to pack: 1 for a broadcast operand
  // Workspace bytes, each rounded up to 256: packed A, packed B, partials.
  size_t bytes_a = 0, bytes_b = 0, bytes_partials = 0;
};

WgmmaPlan plan_wgmma(const GemmProblem& p, int splits) {
  auto bytes = [](int64_t floats) { return size_t((floats * 4 + 255) / 256 * 256); };
  WgmmaPlan w;
  w.pack_a = !(p.layout_a == Layout::kRowMajor &&
               tma_compatible(p.A, p.M, p.lda, p.batch, p.batch_stride_a));
  w.pack_b = !(p.layout_b == Layout::kColMajor &&
               tma_compatible(p.B, p.N, p.ldb, p.batch, p.batch_stride_b));
  w.batch_a = p.batch_stride_a == 0 ? 1 : p.batch;
  w.batch_b = p.batch_stride_b == 0 ? 1 : p.batch;
  if (w.pack_a) w.bytes_a = bytes(w.batch_a * p.M * packed_ld(p.K));
  if (w.pack_b) w.bytes_b = bytes(w.batch_b * p.N * packed_ld(p.K));
  if (splits > 1) w.bytes_partials = bytes(splits * p.M * splitk_partials_ld(p.N));
  return w;
}

// Copies one operand (rows x K; K-major when its layout is `k_major_layout`)
// to `dst` as a packed K-major matrix and points the operand fields at it.
cudaError_t pack_operand(const float*& ptr, int64_t& ld, Layout& layout, int64_t& batch_stride,
                         Layout k_major_layout, int64_t rows, int64_t K, int64_t batch,
                         float* dst, cudaStream_t stream) {
  const cudaError_t err = launch_pack_kmajor(ptr, layout == k_major_layout, ld, batch_stride,
                                             rows, K, batch, dst, stream);
  ptr = dst;
  ld = packed_ld(K);
  layout = k_major_layout;
  batch_stride = batch == 1 ? 0 : rows * ld;
  return err;
}

// Packs what plan_wgmma says into `workspace`, then runs the chosen wgmma
// configuration on the K-major operands.
cudaError_t run_wgmma(GemmProblem p, const Choice& c, void* workspace, cudaStream_t stream) {
  const WgmmaPlan w = plan_wgmma(p, c.splits);
  auto* ws = static_cast<uint8_t*>(workspace);
  cudaError_t err = cudaSuccess;
  if (w.pack_a)
    err = pack_operand(p.A, p.lda, p.layout_a, p.batch_stride_a, Layout::kRowMajor, p.M, p.K,
                       w.batch_a, reinterpret_cast<float*>(ws), stream);
  if (w.pack_b && err == cudaSuccess)
    err = pack_operand(p.B, p.ldb, p.layout_b, p.batch_stride_b, Layout::kColMajor, p.N, p.K,
                       w.batch_b, reinterpret_cast<float*>(ws + w.bytes_a), stream);
  if (err != cudaSuccess) return err;
  float* partials = reinterpret_cast<float*>(ws + w.bytes_a + w.bytes_b);
  switch (c.kernel) {
    case Kernel::kWgmmaNarrow:
      return launch_wgmma_gemm<WgmmaNarrow>(p, c.splits, partials, stream);
    case Kernel::kWgmmaMedium:
      return launch_wgmma_gemm<WgmmaMedium>(p, c.splits, partials, stream);
    default:
      return launch_wgmma_gemm<WgmmaLarge>(p, c.splits, partials, stream);
  }
}

template <class Config>
std::string wgmma_name(const GemmProblem& p, int splits) {
  using std::to_string;
  const WgmmaPlan w = plan_wgmma(p, splits);
  std::string name = "wgmma " + to_string(Config::BM) + "x" + to_string(Config::BN) + "x" +
                     to_string(Config::BK) + " stages " + to_string(Config::kStages) +
                     " cluster " + to_string(Config::kClusterM) + "x1";
  if (splits > 1) name += " split-K " + to_string(splits);
  if (w.pack_a || w.pack_b)
    name += std::string(" after packing ") + (w.pack_a ? (w.pack_b ? "A and B" : "A") : "B") +
            " K-major";
  return name;
}

}  // namespace

size_t gemm_workspace_bytes(const GemmProblem& p, Precision precision) {
  const Choice c = choose(p, precision, device_info(current_device()));
  if (!is_wgmma(c.kernel)) return 0;
  const WgmmaPlan w = plan_wgmma(p, c.splits);
  return w.bytes_a + w.bytes_b + w.bytes_partials;
}

cudaError_t run_gemm(const GemmProblem& p, Precision precision, void* workspace,
                     cudaStream_t stream) {
  const Choice c = choose(p, precision, device_info(current_device()));
  switch (c.kernel) {
    case Kernel::kWgmmaLarge:
    case Kernel::kWgmmaMedium:
    case Kernel::kWgmmaNarrow:
      return run_wgmma(p, c, workspace, stream);
    case Kernel::kMmaSyncLarge:
      return launch_mma_sync_width<MmaSyncLarge, true>(p, stream);
    case Kernel::kMmaSyncMedium:
      return launch_mma_sync<MmaSyncMedium>(p, c.vec16, stream);
    case Kernel::kMmaSyncSmall:
      return launch_mma_sync<MmaSyncSmall>(p, c.vec16, stream);
    case Kernel::kFma:
    default:
      return launch_fma_gemm(p, stream);
  }
}

std::string describe_gemm(const GemmProblem& p, Precision precision) {
  const Choice c = choose(p, precision, device_info(current_device()));
  std::string name;
  switch (c.kernel) {
    case Kernel::kWgmmaLarge:
      name = wgmma_name<WgmmaLarge>(p, c.splits);
      break;
    case Kernel::kWgmmaMedium:
      name = wgmma_name<WgmmaMedium>(p, c.splits);
      break;
    case Kernel::kWgmmaNarrow:
      name = wgmma_name<WgmmaNarrow>(p, c.splits);
      break;
    case Kernel::kMmaSyncLarge:
      name = mma_sync_name<MmaSyncLarge>();
      break;
    case Kernel::kMmaSyncMedium:
      name = mma_sync_name<MmaSyncMedium>();
      break;
    case Kernel::kMmaSyncSmall:
      name = mma_sync_name<MmaSyncSmall>();
      break;
    case Kernel::kFma:
      name = "fma";
      break;
  }
  name += std::string(" (A ") + layout_name(p.layout_a) + ", B " + layout_name(p.layout_b);
  if (c.kernel != Kernel::kFma && !is_wgmma(c.kernel))
    name += c.vec16 ? ", 16-byte loads" : ", 4-byte loads";
  return name + ")";
}

}  // namespace pygpukit
