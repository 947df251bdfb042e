// Argument checking shared by every backend of pygpukit::linear_tf32:
// y = act(x @ weight.T + bias) with nn.Linear's shapes, float32 only.
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/core/DimVector.h>
#include <ATen/core/Tensor.h>

namespace pygpukit {

// x[*lead, K] @ weight[N, K]ᵀ, flattened to M = prod(lead) rows.
struct LinearShapes {
  int64_t M = 1, N = 0, K = 0;
  at::DimVector out;  // sizes of the (contiguous) result: [*lead, N]; inline, no heap
};

// The shape of the result, [*lead, N], for real, meta and fake tensors (with
// torch.compile's symbolic sizes): the one place the arguments are checked.
// Throws c10::Error (RuntimeError in Python) naming the problem: a 0-D x, a
// weight that is not 2-D, a bias that is not [N], a dtype other than
// float32, a non-strided layout, tensors on different devices, or
// x.size(-1) != weight.size(1).
c10::SymDimVector linear_result_shape(const at::Tensor& x, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias);

// linear_result_shape's checks, and the shapes of real tensors.
LinearShapes check_linear_args(const at::Tensor& x, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias);

}  // namespace pygpukit
