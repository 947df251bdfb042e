// TMA tensor maps (CUtensorMap) for the Hopper path, encoded on the host.
#pragma once

#include <cstdint>

#include <cuda.h>

namespace pygpukit {

// Whether every row of a row-major matrix (element (b, r, c) at
// b * batch_stride + r * ld + c) starts `bytes`-aligned, `bytes` a multiple
// of 4: the base, and row and batch strides that are multiples of `bytes`
// (a stride that is never used, for one row or one batch entry, does not
// count).
bool rows_aligned(const float* ptr, int64_t rows, int64_t ld, int64_t batch, int64_t batch_stride,
                  int bytes);

// Whether TMA can address a row-major matrix in place: its rows 16-byte
// aligned.
inline bool tma_compatible(const float* ptr, int64_t rows, int64_t ld, int64_t batch,
                           int64_t batch_stride) {
  return rows_aligned(ptr, rows, ld, batch, batch_stride, 16);
}

// A tensor of `rank` dimensions (dims innermost first, the byte strides of
// all but the innermost, a box of `box` elements) as a tensor map with the
// 128-byte swizzle. Returns false if the driver lacks cuTensorMapEncodeTiled
// or rejects the map.
bool encode_tensor_map(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* ptr,
                       const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box);

// A row-major matrix X[batch][rows][cols] (element (r, c) at
// r * ld + c, batch entries batch_stride apart; batch_stride 0 broadcasts)
// as a 3-D tensor map with box [1][box_rows][32] and the 128-byte swizzle.
// Declaring the data TFLOAT32 makes TMA round each element to nearest on
// loads. Out-of-bounds elements load as zeros and are not stored. Returns
// false if the driver lacks cuTensorMapEncodeTiled or rejects the map.
bool encode_matrix(CUtensorMap* map, CUtensorMapDataType type, const float* ptr, int64_t rows,
                   int64_t cols, int64_t ld, int64_t batch, int64_t batch_stride, int box_rows);

}  // namespace pygpukit
