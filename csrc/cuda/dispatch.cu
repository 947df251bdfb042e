// The one place that decides which kernel and tile configuration runs a GEMM.
// Later paths (Hopper wgmma, split-K, 3xTF32) are added here.
#include <array>
#include <mutex>
#include <string>

#include "fma_gemm.h"
#include "gemm_problem.h"
#include "mma_sync_config.h"

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

enum class Kernel { kMmaSyncLarge, kMmaSyncSmall, kFma };

struct Choice {
  Kernel kernel;
  bool vec16;  // 16-byte loads (mma_sync only)
};

// 16-byte cp.async needs every chunk start 16-byte aligned: the base pointer,
// the leading dimension and the batch stride (in floats) all multiples of 4.
bool aligned16(const float* ptr, int64_t ld, int64_t batch_stride) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && ld % 4 == 0 && batch_stride % 4 == 0;
}

int64_t tiles(const GemmProblem& p, int bm, int bn) {
  return ((p.M + bm - 1) / bm) * ((p.N + bn - 1) / bn);
}

Choice choose(const GemmProblem& p, Precision precision, const DeviceInfo& d) {
  const bool vec16 = aligned16(p.A, p.lda, p.batch_stride_a) &&
                     aligned16(p.B, p.ldb, p.batch_stride_b);
  // mma.sync TF32 needs sm_80; FP32 precision never uses tensor cores.
  if (precision == Precision::kIEEE || d.cc_major < 8) return {Kernel::kFma, false};
  const int large_smem = mma_sync_smem_bytes<MmaSyncLarge>(p.layout_a, p.layout_b);
  // The large tile wins once it fills every SM at least once; below that the
  // small tile's 4x more blocks keep more SMs busy.
  const bool large_fits = d.smem_per_block_optin >= large_smem;
  const bool enough_work = tiles(p, MmaSyncLarge::BM, MmaSyncLarge::BN) * p.batch >= d.sm_count;
  return {large_fits && enough_work ? Kernel::kMmaSyncLarge : Kernel::kMmaSyncSmall, vec16};
}

template <class Config>
cudaError_t launch_mma_sync(const GemmProblem& p, bool vec16, cudaStream_t stream) {
  using L = Layout;
  const bool a_row = p.layout_a == L::kRowMajor, b_row = p.layout_b == L::kRowMajor;
#define PYGPUKIT_LAUNCH(LA, LB)                                                   \
  return vec16 ? launch_mma_sync_gemm<Config, LA, LB, true>(p, stream)          \
               : launch_mma_sync_gemm<Config, LA, LB, false>(p, stream)
  if (a_row && b_row) PYGPUKIT_LAUNCH(L::kRowMajor, L::kRowMajor);
  if (a_row) PYGPUKIT_LAUNCH(L::kRowMajor, L::kColMajor);
  if (b_row) PYGPUKIT_LAUNCH(L::kColMajor, L::kRowMajor);
  PYGPUKIT_LAUNCH(L::kColMajor, L::kColMajor);
#undef PYGPUKIT_LAUNCH
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

}  // namespace

cudaError_t run_gemm(const GemmProblem& p, Precision precision, cudaStream_t stream) {
  const Choice c = choose(p, precision, device_info(current_device()));
  switch (c.kernel) {
    case Kernel::kMmaSyncLarge:
      return launch_mma_sync<MmaSyncLarge>(p, c.vec16, stream);
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
    case Kernel::kMmaSyncLarge:
      name = mma_sync_name<MmaSyncLarge>();
      break;
    case Kernel::kMmaSyncSmall:
      name = mma_sync_name<MmaSyncSmall>();
      break;
    case Kernel::kFma:
      name = "fma";
      break;
  }
  name += std::string(" (A ") + layout_name(p.layout_a) + ", B " + layout_name(p.layout_b);
  if (c.kernel != Kernel::kFma) name += c.vec16 ? ", 16-byte loads" : ", 4-byte loads";
  return name + ")";
}

}  // namespace pygpukit
