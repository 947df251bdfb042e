// Argument checking shared by every backend of pygpukit::matmul_tf32: the
// shape rules of torch.matmul for float32 operands, and the precision switch.
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/core/DimVector.h>
#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include "ops/gemm_types.h"

namespace pygpukit {

// Shapes of a @ b under torch.matmul's rules: a 1-D a is a row vector [1, K]
// and a 1-D b a column vector [K, 1] (that dimension is dropped from the
// output), and the batch dimensions (all but the last two) broadcast.
// DimVectors hold up to 5 sizes inline: no heap allocation per call.
struct MatmulShapes {
  at::DimVector batch;  // broadcast batch shape
  int64_t M = 1, N = 1, K = 0;
  at::DimVector out;  // sizes of the (contiguous) result
};

// The shape of a @ b, for real, meta and fake tensors (with torch.compile's
// symbolic sizes): the one place the arguments are checked. Throws
// c10::Error (RuntimeError in Python) naming the problem: a 0-D operand, a
// dtype other than float32, a non-strided layout, operands on different
// devices, shapes that cannot be multiplied or broadcast, or a result with
// more elements than int64_t counts.
c10::SymDimVector matmul_result_shape(const at::Tensor& a, const at::Tensor& b);

// matmul_result_shape's checks, and the shapes of real tensors.
MatmulShapes check_matmul_args(const at::Tensor& a, const at::Tensor& b);

// "tf32", "tf32x3", "fp32" or "ieee"; None takes the default (settings.h).
// Throws ValueError for any other name, naming the operator `op` (every
// pygpukit operator takes this argument).
Precision parse_precision(std::optional<c10::string_view> precision, const char* op);

}  // namespace pygpukit
