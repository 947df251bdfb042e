// Autograd for the pygpukit operators, registered at the Autograd dispatch
// key: matmul_tf32's and linear_tf32's derivative formulas as
// torch::autograd::Function subclasses. They live in C++ rather than in
// torch.library.register_autograd because that Python kernel ran on every
// call, no_grad included, adding ~10 µs of host time to each: on the H200 a
// decode-sized call (x[1, 4096] @ W.T) took ~30 µs of host time for 16-20 µs
// of GPU work. Here a call that records no graph costs one GradMode and
// requires_grad test before the backend kernel.
//
// The gradients are computed by the same operators at the forward's
// precision, called through the dispatcher, so that double backward
// differentiates them again and torch.compile traces them through their
// meta kernels (csrc/ops/matmul_tf32.cpp, csrc/ops/linear_tf32.cpp).
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include "ops/activation.h"
#include "ops/op_handles.h"

namespace pygpukit {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The operator's kernel below autograd: the backend (CPU/CUDA), or under
// torch.compile and DTensor whatever sits there (functionalization, fake
// tensors, DTensor's dispatch). The guard also keeps the kernel's own ATen
// calls from passing through autograd again, as ATen's generated autograd
// kernels do.
template <class Signature, class... Args>
at::Tensor call_below_autograd(const c10::TypedOperatorHandle<Signature>& op, Args&&... args) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return op.call(std::forward<Args>(args)...);
}

// The gradient flowing into backward, strided: `backward(gradient=...)`
// takes a sparse one too (torch.matmul's and F.linear's backward accept
// it), which the products below, strided only, would refuse.
at::Tensor strided_grad(const at::Tensor& grad) {
  return grad.defined() && grad.layout() != at::kStrided ? grad.to_dense() : grad;
}

// precision as the forward got it: None stays None, so that backward reads
// the environment when it runs, as every call without a precision does.
void save_precision(AutogradContext* ctx, PrecisionArg precision) {
  ctx->saved_data["precision"] = precision ? c10::IValue(*precision) : c10::IValue();
}

PrecisionArg saved_precision(AutogradContext* ctx) {
  const c10::IValue& p = ctx->saved_data["precision"];
  return p.isNone() ? PrecisionArg() : PrecisionArg(p.toStringView());
}

// d(a @ b): grad_a = grad @ bᵀ, grad_b = aᵀ @ grad. 1-D operands are promoted
// to matrices the way torch.matmul does, the transposes are views (read in
// place as column-major), and broadcast batch dimensions are summed back to
// each input's shape with at::sum_to, as torch's expand does: a size known
// only at run time is assumed not to be 1 there and asserted, where
// sum_to_size would guard on it and fail under torch.compile.
struct MatmulTF32 : public torch::autograd::Function<MatmulTF32> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                            PrecisionArg precision) {
    at::Tensor out = call_below_autograd(matmul_tf32_op(), a, b, precision);
    // grad_a needs only b and grad_b only a: save no more than asked for.
    ctx->save_for_backward(
        {b.requires_grad() ? a : at::Tensor(), a.requires_grad() ? b : at::Tensor()});
    // Symbolic under torch.compile with dynamic shapes.
    ctx->saved_data["a_sizes"] = a.sym_sizes();
    ctx->saved_data["b_sizes"] = b.sym_sizes();
    save_precision(ctx, precision);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1];
    const std::vector<c10::SymInt> a_sizes = ctx->saved_data["a_sizes"].toSymIntVector();
    const std::vector<c10::SymInt> b_sizes = ctx->saved_data["b_sizes"].toSymIntVector();
    const PrecisionArg precision = saved_precision(ctx);
    at::Tensor g = strided_grad(grads[0]);
    if (b_sizes.size() == 1) g = g.unsqueeze(-1);
    if (a_sizes.size() == 1) g = g.unsqueeze(-2);
    at::Tensor grad_a, grad_b;
    if (ctx->needs_input_grad(0)) {
      const at::Tensor b2 = b.dim() == 1 ? b.unsqueeze(-1) : b;
      std::vector<c10::SymInt> a2_sizes = a_sizes;
      if (a_sizes.size() == 1) a2_sizes.insert(a2_sizes.begin(), 1);
      grad_a = at::sum_to(matmul_tf32_op().call(g, b2.mT(), precision), a2_sizes);
      grad_a = grad_a.reshape_symint(a_sizes);
    }
    if (ctx->needs_input_grad(1)) {
      const at::Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
      std::vector<c10::SymInt> b2_sizes = b_sizes;
      if (b_sizes.size() == 1) b2_sizes.push_back(1);
      grad_b = at::sum_to(matmul_tf32_op().call(a2.mT(), g, precision), b2_sizes);
      grad_b = grad_b.reshape_symint(b_sizes);
    }
    return {grad_a, grad_b, at::Tensor()};
  }
};

// t[..., C] as a matrix [rows, C] (a 1-D t is one row). The row count is
// spelled out: reshape(-1, C) fails when C or a leading dimension is 0, and
// flatten has no batching rule, so it failed under vmap (backward with
// is_grads_batched=True, jacobian/hessian with vectorize=True).
at::Tensor rows(const at::Tensor& t) {
  c10::SymInt count = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) count *= t.sym_size(d);
  return t.reshape_symint({count, t.sym_size(-1)});
}

// dL/dz from dL/dy for y = act(z), with ATen's own derivative formulas.
at::Tensor activation_backward(const at::Tensor& grad, Activation act, const variable_list& saved,
                               PrecisionArg precision) {
  const at::Tensor &x = saved[0], &weight = saved[1], &bias = saved[2], &y = saved[3];
  if (act == Activation::kNone) return grad;
  if (act == Activation::kRelu) return at::threshold_backward(grad, y, 0);
  const std::optional<at::Tensor> z_bias = bias.defined() ? std::optional(bias) : std::nullopt;
  const at::Tensor z = linear_tf32_op().call(x, weight, z_bias, "none", precision);
  if (act == Activation::kSilu) {
    // silu'(z) = s (1 + z (1 - s)), s = sigmoid(z), in differentiable ops
    // (aten::silu_backward has no derivative of its own: double backward).
    const at::Tensor s = at::sigmoid(z);
    return grad * s * (z * at::rsub(s, 1) + 1);
  }
  return at::gelu_backward(grad, z, act == Activation::kGeluTanh ? "tanh" : "none");
}

// d(act(x @ weight.T + bias)): with g = dL/dz for the pre-activation z,
// grad_x = g @ weight, grad_weight = gᵀ @ x (over all rows), grad_bias = g
// summed over rows; the products on matmul_tf32 at the forward's precision,
// transposes read in place.
struct LinearTF32 : public torch::autograd::Function<LinearTF32> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, c10::string_view activation,
                            PrecisionArg precision) {
    at::Tensor y = call_below_autograd(linear_tf32_op(), x, weight, bias, activation, precision);
    // The operator has accepted the name: this cannot throw.
    const Activation act = parse_activation(activation, "linear_tf32");
    // The activation's derivative needs the pre-activation z, which the
    // operator does not return. Saving it would take a second output: an
    // extra M x N store in every forward, inference included, and M x N more
    // activation memory per layer in training. Instead backward recomputes z
    // with one more (non-activated) linear_tf32, like activation
    // checkpointing; the kernels are deterministic, so it is bitwise the
    // forward's z. ReLU needs no z: z > 0 exactly where the output is > 0.
    // Only a weight that requires grad gets here with GELU or SiLU
    // (linear_tf32_autograd), so x is saved for its gradient anyway.
    const bool recompute =
        act == Activation::kGelu || act == Activation::kGeluTanh || act == Activation::kSilu;
    TORCH_INTERNAL_ASSERT(!recompute || weight.requires_grad());
    ctx->save_for_backward({weight.requires_grad() ? x : at::Tensor(),
                            (x.requires_grad() || recompute) ? weight : at::Tensor(),
                            recompute && bias.has_value() ? *bias : at::Tensor(),
                            act == Activation::kRelu ? y : at::Tensor()});
    ctx->saved_data["activation"] = static_cast<int64_t>(act);
    // Without a bias, backward has no third input to ask needs_input_grad about.
    ctx->saved_data["has_bias"] = bias.has_value();
    save_precision(ctx, precision);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1];
    const PrecisionArg precision = saved_precision(ctx);
    const auto act = static_cast<Activation>(ctx->saved_data["activation"].toInt());
    const at::Tensor g = activation_backward(strided_grad(grads[0]), act, saved, precision);
    at::Tensor grad_x, grad_w, grad_b;
    if (ctx->needs_input_grad(0)) grad_x = matmul_tf32_op().call(g, weight, precision);
    const at::Tensor g2 = rows(g);
    if (ctx->needs_input_grad(1)) grad_w = matmul_tf32_op().call(g2.mT(), rows(x), precision);
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) grad_b = g2.sum(0);
    return {grad_x, grad_w, grad_b, at::Tensor(), at::Tensor()};
  }
};

// Forward-mode AD has no formula here. A tangent on an input must raise, not
// be dropped: dropped, torch.func.jacfwd returned an all-zero Jacobian.
// (Level 0 is the one ATen's own kernels check, isFwGradDefined.)
void check_no_tangent(const char* op, std::initializer_list<const at::Tensor*> inputs) {
  for (const at::Tensor* t : inputs)
    TORCH_CHECK_NOT_IMPLEMENTED(!(t->defined() && t->_fw_grad(/*level=*/0).defined()), op,
                                ": forward-mode AD (torch.func.jvp, jacfwd, "
                                "torch.autograd.forward_ad) is not implemented");
}

// Outside grad mode, or when no input requires grad, no graph is recorded
// and nothing is saved: straight to the kernel below autograd. So does a
// None operand (an undefined tensor), whose argument checks there name it
// (no graph node can be built around it).
at::Tensor matmul_tf32_autograd(const at::Tensor& a, const at::Tensor& b, PrecisionArg precision) {
  check_no_tangent("matmul_tf32", {&a, &b});
  if (a.defined() && b.defined() && torch::autograd::compute_requires_grad(a, b))
    return MatmulTF32::apply(a, b, precision);
  return call_below_autograd(matmul_tf32_op(), a, b, precision);
}

at::Tensor linear_tf32_autograd(const at::Tensor& x, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias, c10::string_view activation,
                                PrecisionArg precision) {
  const at::Tensor none;
  check_no_tangent("linear_tf32", {&x, &weight, bias.has_value() ? &*bias : &none});
  if (!(x.defined() && weight.defined() && torch::autograd::compute_requires_grad(x, weight, bias)))
    return call_below_autograd(linear_tf32_op(), x, weight, bias, activation, precision);
  // An unknown activation goes to the operator too, whose checks (tensors,
  // then activation) then raise what the call raises without grad. (Checking
  // the tensors here instead would read their sizes as integers on every
  // call: under torch.compile, a recompilation per input shape.)
  const std::optional<Activation> act = activation_named(activation);
  if (weight.requires_grad() || !act || *act == Activation::kNone || *act == Activation::kRelu)
    return LinearTF32::apply(x, weight, bias, activation, precision);
  // A frozen weight with GELU or SiLU: no gradient needs x, which the fused
  // node would save only to recompute the pre-activation z. Saved, x made a
  // backward fail where nn.Linear + nn.GELU's works: x changed in place
  // after the layer (a residual `x += mlp(x)`), or x an inference tensor.
  // So z is computed (and saved by ATen's activation) as torch's unfused
  // pair does; the activation is then ATen's rather than the epilogue's,
  // which may differ from it in the last bits (on the CPU too: ~1e-7 of the
  // output's norm), and the M x N pre-activation is stored and passed over
  // once more: the cost for a frozen base layer, as in LoRA-style
  // fine-tuning.
  return apply_activation(LinearTF32::apply(x, weight, bias, "none", precision), *act);
}

}  // namespace

TORCH_LIBRARY_IMPL(pygpukit, Autograd, m) {
  m.impl("matmul_tf32", &matmul_tf32_autograd);
  m.impl("linear_tf32", &linear_tf32_autograd);
}

}  // namespace pygpukit
