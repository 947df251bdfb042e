#include "cuda/hopper/tensor_map.h"

#include <cuda_runtime.h>

#include "cuda/common/int_math.h"

namespace pygpukit {
namespace {

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
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                             cudaEnableDefault, &status);
#else  // CUDA 12.0-12.4: the versioned lookup does not exist yet
    const cudaError_t err =
        cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &ptr, cudaEnableDefault, &status);
#endif
    if (err != cudaSuccess || status != cudaDriverEntryPointSuccess) ptr = nullptr;
    return reinterpret_cast<EncodeTiled>(ptr);
  }();
  return fn;
}

}  // namespace

bool rows_aligned(const float* ptr, int64_t rows, int64_t ld, int64_t batch, int64_t batch_stride,
                  int bytes) {
  const int floats = bytes / 4;
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0 && (rows == 1 || ld % floats == 0) &&
         (batch == 1 || batch_stride % floats == 0);
}

bool encode_tensor_map(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* ptr,
                       const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  auto encode_once = [&] {
    return encode(map, type, cuuint32_t(rank), const_cast<void*>(ptr), dims, strides, box,
                  element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  };
  if (encode_once() == CUDA_SUCCESS) return true;
  // A thread that has made no runtime call that binds the device's primary
  // context has none current (torch's device guard skips cudaSetDevice when
  // the device is already the current one), and this driver call then
  // fails with CUDA_ERROR_INVALID_CONTEXT: H100, 2026-12-07, from a new
  // std::thread it returned 201 before and after cudaGetDevice, 0 after
  // cudaSetDevice. Without this retry 11-15 of 36 new threads making their
  // first products at once failed; with it, none (4 processes of 36
  // threads, 1152 calls). Bind the context and try once more; a map the
  // driver rejects for its arguments fails again, at the cost of one call.
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();  // not sticky; the failed encoding is what gets reported
    return false;
  }
  return encode_once() == CUDA_SUCCESS;
}

bool encode_matrix(CUtensorMap* map, CUtensorMapDataType type, const float* ptr, int64_t rows,
                   int64_t cols, int64_t ld, int64_t batch, int64_t batch_stride, int box_rows) {
  // Strides TMA never follows (one row, one batch entry) still have to be
  // valid multiples of 16 bytes.
  const int64_t row_bytes = rows > 1 ? ld * 4 : round_up(cols * 4, 16);
  const bool batched = batch > 1 && batch_stride != 0;
  const cuuint64_t dims[3] = {cuuint64_t(cols), cuuint64_t(rows), cuuint64_t(batched ? batch : 1)};
  const cuuint64_t strides[2] = {cuuint64_t(row_bytes),
                                 cuuint64_t(batched ? batch_stride * 4 : row_bytes * rows)};
  const cuuint32_t box[3] = {32, cuuint32_t(box_rows), 1};
  return encode_tensor_map(map, type, 3, ptr, dims, strides, box);
}

}  // namespace pygpukit
