#include "ops/linear_args.h"

#include <string>

#include <c10/core/SymBool.h>
#include <c10/util/Exception.h>

#include "ops/error_format.h"

namespace pygpukit {

c10::SymDimVector linear_result_shape(const at::Tensor& x, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias) {
  const at::Tensor* b = bias.has_value() ? &*bias : nullptr;
  // The schema takes None for an undefined tensor.
  TORCH_CHECK(x.defined() && weight.defined(), "linear_tf32: expected tensors, got None for ",
              x.defined() ? "weight" : "x");
  TORCH_CHECK(x.dim() >= 1, "linear_tf32: x needs at least 1 dimension, got a 0-d tensor");
  TORCH_CHECK(weight.dim() == 2,
              "linear_tf32: expected weight of shape [out_features, in_features], got shape ",
              shape(weight.sym_sizes()));
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                  (!b || b->scalar_type() == at::kFloat),
              "linear_tf32: expected float32 tensors, got x of dtype ", x.scalar_type(),
              ", weight of dtype ", weight.scalar_type(),
              b ? std::string(" and bias of dtype ") + c10::toString(b->scalar_type()) : "");
  TORCH_CHECK(x.layout() == at::kStrided && weight.layout() == at::kStrided &&
                  (!b || b->layout() == at::kStrided),
              "linear_tf32: expected dense (strided) tensors, got x with layout ", x.layout(),
              ", weight with layout ", weight.layout(),
              b ? std::string(" and bias with layout ") + c10::str(b->layout()) : "");
  TORCH_CHECK(x.device() == weight.device() && (!b || b->device() == x.device()),
              "linear_tf32: expected ", b ? "x, weight and bias" : "x and weight",
              " on the same device, got x on ", x.device().str(), b ? ", weight on " : " and weight on ",
              weight.device().str(), b ? " and bias on " + b->device().str() : "");

  // Sizes as SymInts (see matmul_result_shape).
  const c10::SymIntArrayRef xs = x.sym_sizes(), ws = weight.sym_sizes();
  TORCH_SYM_CHECK(xs.back().sym_eq(ws[1]),
                  "linear_tf32: x's last dimension must equal weight's in_features: x has shape ",
                  shape(xs), " and weight has shape ", shape(ws), " (x.size(-1) = ", num(xs.back()),
                  " but weight.size(1) = ", num(ws[1]), ")");
  // After the weight's check: a weight passed as [in_features, out_features]
  // is named as such, not blamed on a bias that matches its true out_features.
  TORCH_CHECK(!b || b->dim() == 1, "linear_tf32: expected bias of shape [", num(ws[0]),
              "] (weight.size(0), the out_features), got shape ", b ? shape(b->sym_sizes()) : "");
  if (b)
    TORCH_SYM_CHECK(b->sym_size(0).sym_eq(ws[0]), "linear_tf32: expected bias of shape [", num(ws[0]),
                    "] (weight.size(0), the out_features), got shape ", shape(b->sym_sizes()));
  c10::SymDimVector out(xs.begin(), xs.end() - 1);
  out.push_back(ws[0]);
  return out;
}

LinearShapes check_linear_args(const at::Tensor& x, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias) {
  const c10::SymDimVector out = linear_result_shape(x, weight, bias);
  LinearShapes s;
  s.K = x.size(-1);
  s.N = weight.size(0);
  for (const c10::SymInt& d : out) s.out.push_back(d.expect_int());
  for (size_t i = 0; i + 1 < s.out.size(); ++i) s.M *= s.out[i];
  return s;
}

}  // namespace pygpukit
