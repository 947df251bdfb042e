"""pygpukit::linear_tf32: values against act(F.linear) in float64, gradients
against PyTorch's, opcheck, special values and errors."""

import pytest
import torch

from pygpukit_torch import TF32Linear, linear_tf32
from conftest import (ACTIVATIONS, DEVICE_KERNELS, DEVICES, assert_linear_close, linear_reference, neg_bit_view,
                      poison_next_output, opcheck, requires_cuda)

ACTS = list(ACTIVATIONS)


def run(x, weight, bias=None, activation="none", precision=None):
    """linear_tf32 with its output memory NaN-poisoned beforehand (on CUDA)."""
    poison_next_output(tuple(x.shape[:-1]) + (weight.shape[0],), x.device.type)
    return linear_tf32(x, weight, bias, activation, precision=precision)


def layer(in_features, out_features, bias, device):
    """weight and bias drawn like nn.Linear's (uniform ±1/sqrt(in_features))."""
    lin = torch.nn.Linear(in_features, out_features, bias=bias, device=device)
    return lin.weight.detach(), None if lin.bias is None else lin.bias.detach()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ACTS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_shape,out_features", [((33, 65), 47), ((3, 17, 40), 33), ((40,), 9),
                                                  ((130, 257), 129), ((1, 64), 96)])
def test_values(device, activation, bias, x_shape, out_features):
    x = torch.randn(x_shape, device=device)
    w, b = layer(x_shape[-1], out_features, bias, device)
    assert_linear_close(run(x, w, b, activation), x, w, b, activation)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_shape,out_features", [((1, 64), 96), ((33, 65), 47), ((5, 40), 1)])
def test_negative_bit_views(device, x_shape, out_features):
    """x, weight and bias as views with ATen's negative bit (`z.conj().imag`
    gives such views): the kernels and the epilogue read memory, so the bit
    must be resolved before them (ATen's Negative key does it; see
    test_matmul's test_negative_bit_views)."""
    x = torch.randn(x_shape, device=device)
    w, b = layer(x_shape[-1], out_features, True, device)
    out = run(neg_bit_view(x), neg_bit_view(w), neg_bit_view(b), "relu")
    assert_linear_close(out, x, w, b, "relu")


@requires_cuda
@pytest.mark.parametrize("activation", ACTS)
@pytest.mark.parametrize("x_shape", [(2, 64, 4095), (333, 4095)])
def test_odd_features_large_cuda(activation, x_shape):
    x = torch.randn(x_shape, device="cuda")
    w, b = layer(4095, 4097, True, "cuda")
    assert_linear_close(run(x, w, b, activation), x, w, b, activation)


def _x_view(kind, device):
    """A [.., 5 or more rows, 24] x stored as `kind`."""
    if kind == "sliced_features":  # row-major, leading dimension 40 (read in place)
        return torch.randn(2, 7, 40, device=device)[..., 3:27]
    if kind == "transposed":  # column-major 2-D (read in place)
        return torch.randn(24, 37, device=device).mT
    if kind == "every_other_row":  # leading dims merge with a stride (read in place)
        return torch.randn(4, 10, 24, device=device)[:, ::2]
    if kind == "transposed_batch":  # leading dims do not merge: one copy
        return torch.randn(7, 3, 24, device=device).transpose(0, 1)
    if kind == "strided_features":  # neither row- nor column-major: one copy
        return torch.randn(9, 48, device=device)[:, ::2]
    if kind == "expanded":  # stride-0 rows
        return torch.randn(1, 24, device=device).expand(6, 24)
    if kind == "offset":  # base pointer 4 bytes past 16-byte alignment
        return torch.randn(13 * 24 + 1, device=device)[1:].view(13, 24)
    raise ValueError(kind)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["sliced_features", "transposed", "every_other_row", "transposed_batch",
                                  "strided_features", "expanded", "offset"])
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_non_contiguous_x(device, kind, activation):
    x = _x_view(kind, device)
    assert not x.is_contiguous() or kind == "offset"
    w, b = layer(24, 19, True, device)
    assert_linear_close(run(x, w, b, activation), x, w, b, activation)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_weight_and_bias(device):
    x = torch.randn(20, 24, device=device)
    w_t = torch.randn(24, 19, device=device) / 5  # weight.mT: a row-major B, read in place
    w_sliced = torch.randn(19, 30, device=device)[:, 2:26] / 5
    b = torch.randn(38, device=device)[::2]  # strided bias: copied (N floats)
    for w in (w_t.mT, w_sliced):
        assert_linear_close(run(x, w, b, "silu"), x, w, b, "silu")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ACTS)
@pytest.mark.parametrize("x_shape,out_features", [((0, 5), 3), ((4, 5), 0), ((2, 0, 5), 3), ((4, 0), 3)])
def test_empty(device, activation, x_shape, out_features):
    x = torch.randn(x_shape, device=device)
    w, b = torch.randn(out_features, x_shape[-1], device=device), torch.randn(out_features, device=device)
    out = run(x, w, b, activation)
    # K = 0: the product is zero, so the result is act(bias) on every row.
    torch.testing.assert_close(out, linear_reference(x, w, b, activation).float())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ACTS)
def test_ieee_precision(device, activation):
    x = torch.randn(70, 300, device=device)
    w, b = layer(300, 50, True, device)
    out = run(x, w, b, activation, precision="ieee")
    assert_linear_close(out, x, w, b, activation, precision="ieee")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ACTS)
def test_nan_propagates_through_every_activation(device, activation):
    x = torch.randn(8, 16, device=device)
    x[2, 3] = float("nan")
    w, b = layer(16, 12, True, device)
    out = run(x, w, b, activation)  # poisoned: an unwritten element shows as NaN
    assert out[2].isnan().all() and not out[torch.arange(8, device=device) != 2].isnan().any()


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
@pytest.mark.parametrize("activation", ACTS)
def test_activation_of_special_values(device, kernel, activation):
    # x = 0, so the pre-activation is exactly the bias: each kernel's
    # epilogue evaluates the activation at infinities, overflowing and tiny
    # values, signed zeros and NaN, and must agree with torch's float64
    # (torch's float32 CPU GELU gives NaN at +inf in its vectorized loop).
    z = torch.tensor([-float("inf"), -1e30, -1e4, -100.0, -20.0, -1.0, -1e-30, -0.0, 0.0, 1e-30, 0.5,
                      20.0, 100.0, 1e4, 1e30, float("inf"), float("nan")], device=device)
    rows = 1 if kernel == "skinny" else 3
    x = torch.zeros(rows, 64, device=device)
    w = torch.randn(z.numel(), 64, device=device)
    out = run(x, w, z, activation)
    expected = ACTIVATIONS[activation](z.double()).float().expand(rows, -1)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-30, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["tf32", "ieee"])
@pytest.mark.parametrize("activation", ACTS)
def test_activation_of_a_product_beyond_float32(device, precision, activation):
    # The first output, 3e38 * -1 twice, is -6e38: -inf in float32, which
    # the activation must see as torch's does (GELU and SiLU give NaN, ReLU
    # 0). The CPU path applied it to the float64 -6e38 and returned -0.0.
    x = torch.tensor([[3e38, 3e38], [1.0, 2.0]], device=device)
    w = torch.tensor([[-1.0, -1.0], [0.5, 0.25]], device=device)
    out = run(x, w, None, activation, precision=precision)
    expected = ACTIVATIONS[activation]((x.double() @ w.double().T).float().double()).float()
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=0, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["tf32", "tf32x3", "fp32", "ieee"])
@pytest.mark.parametrize("activation", ["none", "relu"])
def test_bias_does_not_bring_back_a_product_beyond_float32(device, precision, activation):
    # 2^127 * 4 is +inf in float32 (exact in TF32 too, so every precision
    # overflows), and stays +inf after -FLT_MAX is added, as in F.linear.
    # The CPU path added the bias to the float64 product and returned FLT_MAX.
    fmax = torch.finfo(torch.float32).max
    x = torch.tensor([[2.0 ** 127]], device=device)
    w, b = torch.tensor([[4.0]], device=device), torch.tensor([-fmax], device=device)
    out = run(x, w, b, activation, precision=precision)
    assert out.item() == float("inf"), out


@pytest.mark.parametrize("device", DEVICES)
def test_matches_matmul_tf32_bitwise_without_epilogue(device):
    x = torch.randn(3, 50, 64, device=device)
    w, _ = layer(64, 40, False, device)
    torch.testing.assert_close(linear_tf32(x, w), torch.ops.pygpukit.matmul_tf32(x, w.mT), rtol=0, atol=0)


# ---- autograd ---------------------------------------------------------------------------------

def tf32_exact(shape, device):
    """Multiples of 1/8 in [-1, 1]: exact in TF32, and so are their products
    and short sums, so the forward's pre-activation has no rounding error."""
    return torch.randint(-8, 9, shape, device=device) / 8


def sample_inputs(device, requires_grad, make=torch.randn):
    """(args, kwargs) covering every activation, with and without bias, 1-D to
    3-D x, default and "ieee" precision; values drawn by make(shape, device=)."""
    for i, activation in enumerate(ACTS):
        for x_shape in [(6, 10), (2, 3, 10), (10,)]:
            for bias in (True, False):
                x = make(x_shape, device=device).requires_grad_(requires_grad)
                w = make((7, 10), device=device).requires_grad_(requires_grad)
                b = make((7,), device=device).requires_grad_(requires_grad) if bias else None
                kwargs = {"precision": "ieee"} if i % 2 else {}
                yield (x, w, b, activation), kwargs


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_match_pytorch(device):
    # Exact pre-activations make both sides take the same branch at ReLU's
    # kink and evaluate act' at the same z, so what remains is the backward's
    # own error: one TF32 rounding of dL/dz and of the operands per product.
    for (x, w, b, activation), kwargs in sample_inputs(device, True, make=tf32_exact):
        out = linear_tf32(x, w, b, activation, **kwargs)
        grad = torch.randn_like(out)
        inputs = (x, w) if b is None else (x, w, b)
        ours = torch.autograd.grad(out, inputs, grad)
        ref = torch.autograd.grad(linear_reference(x, w, b, activation), inputs, grad.double())
        for name, g, r in zip(("x", "weight", "bias"), ours, ref):
            assert g.shape == r.shape and g.dtype == torch.float32
            # (a norm-wise bound, not rel_error: a ReLU gradient may be all zero)
            err = float((g.double() - r).norm())
            assert err <= 2e-3 * float(r.norm()) + 1e-6, (activation, name, err, float(r.norm()))


@pytest.mark.filterwarnings("ignore:Input #.* is not a double precision")
@pytest.mark.parametrize("activation", ["none", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("bias", [True, False])
def test_gradcheck_ieee_cpu(activation, bias):
    # With precision="ieee" the CPU op is a float64 computation rounded once to
    # float32, smooth in its inputs, so finite differences with eps 1e-2 agree
    # closely. ReLU's kink makes finite differences unreliable; its gradient
    # is checked against PyTorch's above.
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, requires_grad=True)
    w = torch.randn(4, 6, requires_grad=True)
    args = (x, w, torch.randn(4, requires_grad=True)) if bias else (x, w)

    def f(*t):
        return linear_tf32(t[0], t[1], t[2] if bias else None, activation, precision="ieee")

    assert torch.autograd.gradcheck(f, args, eps=1e-2, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ACTS)
@pytest.mark.parametrize("x_shape", [(3, 6), (2, 3, 6), (6,)])
def test_batched_gradients(device, activation, x_shape):
    """Backward under vmap, as torch.autograd.grad(..., is_grads_batched=True)
    and jacobian/hessian(vectorize=True) run it: the same as one backward per
    gradient, for x, weight and bias."""
    torch.manual_seed(0)
    x = torch.randn(*x_shape, device=device, requires_grad=True)
    w = torch.randn(4, 6, device=device, requires_grad=True)
    b = torch.randn(4, device=device, requires_grad=True)
    out = linear_tf32(x, w, b, activation)
    grads = torch.randn(5, *out.shape, device=device)
    batched = torch.autograd.grad(out, (x, w, b), grads, is_grads_batched=True, retain_graph=True)
    for i in range(grads.shape[0]):
        one = torch.autograd.grad(out, (x, w, b), grads[i], retain_graph=True)
        for g_batched, g in zip(batched, one):
            torch.testing.assert_close(g_batched[i], g)


@pytest.mark.parametrize("device", DEVICES)
def test_only_needed_gradients(device):
    x = torch.randn(4, 5, device=device, requires_grad=True)
    w, b = torch.randn(3, 5, device=device), torch.randn(3, device=device)
    (gx,) = torch.autograd.grad(linear_tf32(x, w, b, "gelu").sum(), (x,))
    assert gx.shape == x.shape
    w.requires_grad_()
    (gw,) = torch.autograd.grad(linear_tf32(x.detach(), w, b, "relu").sum(), (w,))
    assert gw.shape == w.shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "silu"])
def test_frozen_weight_saves_no_input(device, activation):
    # With a frozen weight no gradient needs x. Saved (to recompute the
    # pre-activation), it made a backward fail where nn.Linear + the
    # activation's works: x changed in place after the layer, or x an
    # inference tensor with only the bias trainable.
    w, b = torch.randn(16, 12, device=device), torch.randn(16, device=device)
    x0 = torch.randn(5, 12, device=device, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        x = x0 * 1.0
        y = linear_tf32(x, w, b, activation, precision="ieee")
    assert not any(t.data_ptr() == x.data_ptr() for t in saved)
    x += 1.0  # a residual added in place, after the layer
    (gx,) = torch.autograd.grad(y.square().sum(), x0, create_graph=True)
    (ggx,) = torch.autograd.grad(gx.square().sum(), x0)  # double backward through the saved pre-activation
    x64 = x0.detach().double().requires_grad_()
    y64 = linear_reference(x64, w, b, activation)
    (gx64,) = torch.autograd.grad(y64.square().sum(), x64, create_graph=True)
    (ggx64,) = torch.autograd.grad(gx64.square().sum(), x64)
    torch.testing.assert_close(gx.double(), gx64, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ggx.double(), ggx64, rtol=1e-4, atol=1e-4)
    with torch.inference_mode():
        xi = torch.randn(5, 12, device=device)
    b.requires_grad_()
    (gb,) = torch.autograd.grad(linear_tf32(xi, w, b, activation, precision="ieee").sum(), b)
    b64 = b.detach().double().requires_grad_()
    (gb64,) = torch.autograd.grad(linear_reference(xi.clone(), w, b64, activation).sum(), b64)
    torch.testing.assert_close(gb.double(), gb64, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_frozen_weight_under_torch_compile(device):
    # The frozen-weight form (linear, then ATen's activation) traced by
    # aot_autograd: the same outputs and gradients as eager.
    w, b = torch.randn(16, 12, device=device), torch.randn(16, device=device)
    x = torch.randn(5, 12, device=device, requires_grad=True)

    def f(x):
        return linear_tf32(x, w, b, "silu")

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    outs, grads = [], []
    for fn in (compiled, f):
        out = fn(x)
        outs.append(out)
        grads.append(torch.autograd.grad(out.square().sum(), x)[0])
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_no_autograd_state_without_grad(device, mode):
    x = torch.randn(4, 5, device=device, requires_grad=True)
    w = torch.randn(3, 5, device=device, requires_grad=True)
    with torch.no_grad() if mode == "no_grad" else torch.inference_mode():
        out = linear_tf32(x, w, None, "silu")
    assert out.grad_fn is None and not out.requires_grad
    assert out.is_inference() == (mode == "inference_mode")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(device, requires_grad):
    for args, kwargs in sample_inputs(device, requires_grad):
        opcheck(torch.ops.pygpukit.linear_tf32.default, args, kwargs)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    def f(x, w, b):
        return linear_tf32(x, w, b, "gelu_tanh").sum(-1) + linear_tf32(x, w).mean()

    backend = "inductor" if device == "cuda" else "aot_eager"  # as in test_autograd_compile.py
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    x = torch.randn(3, 8, 16, device=device, requires_grad=True)
    w, b = torch.randn(32, 16, device=device, requires_grad=True), torch.randn(32, device=device)
    out = compiled(x, w, b)
    eager = f(x, w, b)
    torch.testing.assert_close(out, eager, atol=1e-4, rtol=1e-4)
    eager_grads = torch.autograd.grad(eager.sum(), (x, w))
    out.sum().backward()
    tol = 0 if device == "cpu" else 5e-3  # as in test_autograd_compile.py
    for grad, eager_grad in zip((x.grad, w.grad), eager_grads):
        torch.testing.assert_close(grad, eager_grad, atol=tol, rtol=tol)


@pytest.mark.parametrize("frozen", [False, True])
def test_compiled_training_does_not_recompile_per_batch_size(frozen):
    # The autograd kernel checked the tensors itself on every call that
    # needs grad, reading their sizes as integers: under dynamic shapes one
    # graph per batch size.
    layer = TF32Linear(16, 8, activation="gelu").requires_grad_(not frozen)
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(layer, backend=counting_backend, dynamic=True)
    for rows in (3, 5, 7, 11):
        x = torch.randn(rows, 16, requires_grad=True)
        compiled(x).sum().backward()
        assert x.grad.shape == x.shape
    assert len(graphs) == 1


# ---- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("which", ["x", "weight", "bias"])
def test_wrong_dtype_names_it(device, which):
    args = {"x": torch.ones(2, 4, device=device), "weight": torch.ones(3, 4, device=device),
            "bias": torch.ones(3, device=device)}
    args[which] = args[which].double()
    with pytest.raises(RuntimeError, match=f"expected float32 tensors.*{which} of dtype Double"):
        linear_tf32(**args)


@pytest.mark.parametrize("device", DEVICES)
def test_shape_errors(device):
    x, w = torch.ones(2, 5, 4, device=device), torch.ones(3, 4, device=device)
    with pytest.raises(RuntimeError, match=r"x's last dimension must equal weight's in_features.*"
                                           r"\[2, 5, 4\].*\[3, 6\]"):
        linear_tf32(x, torch.ones(3, 6, device=device))
    with pytest.raises(RuntimeError, match=r"expected bias of shape \[3\].*got shape \[4\]"):
        linear_tf32(x, w, torch.ones(4, device=device))
    with pytest.raises(RuntimeError, match=r"expected bias of shape \[3\].*got shape \[1, 3\]"):
        linear_tf32(x, w, torch.ones(1, 3, device=device))
    with pytest.raises(RuntimeError, match="expected weight of shape"):
        linear_tf32(x, torch.ones(4, device=device))
    with pytest.raises(RuntimeError, match="at least 1 dimension"):
        linear_tf32(torch.tensor(1.0, device=device), w)
    # A weight passed as [in, out] with its (correct) bias: the weight is named.
    with pytest.raises(RuntimeError, match=r"weight's in_features.*x.size\(-1\) = 4 but weight.size\(1\) = 3"):
        linear_tf32(x, w.mT, torch.ones(3, device=device))


@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_unknown_activation_lists_valid_names(device):
    x, w = torch.ones(2, 4, device=device), torch.ones(3, 4, device=device)
    with pytest.raises(ValueError, match="unknown activation 'tanh'; expected one of 'none', 'relu', 'gelu', "
                                         "'gelu_tanh', 'silu'"):
        linear_tf32(x, w, None, "tanh")
    with pytest.raises(ValueError, match="linear_tf32: precision must be"):
        linear_tf32(x, w, precision="fp16")


@requires_cuda
@pytest.mark.parametrize("which", ["x", "weight", "bias"])
def test_devices_must_agree(which):
    args = {"x": torch.ones(2, 4, device="cuda"), "weight": torch.ones(3, 4, device="cuda"),
            "bias": torch.ones(3, device="cuda")}
    args[which] = args[which].cpu()
    with pytest.raises(RuntimeError, match="on the same device"):
        linear_tf32(**args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["none", "relu", "gelu", "silu"])
@pytest.mark.parametrize("x_shape,w_shape", [((5, 3), (0, 3)), ((5, 0), (4, 0)), ((3,), (0, 3)), ((0,), (4, 0)),
                                             ((2, 0, 3), (4, 3))])
def test_backward_with_empty_dimensions(device, activation, x_shape, w_shape):
    x = torch.randn(x_shape, device=device, requires_grad=True)
    w = torch.randn(w_shape, device=device, requires_grad=True)
    b = torch.randn(w_shape[0], device=device, requires_grad=True)
    linear_tf32(x, w, b, activation).sum().backward()
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    ref = torch.nn.functional.linear(x64, w64, b64)
    ACTIVATIONS[activation](ref).sum().backward()
    for ours, theirs in ((x, x64), (w, w64), (b, b64)):
        assert ours.grad.shape == theirs.shape
        torch.testing.assert_close(ours.grad.double(), theirs.grad, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh", "relu"])
def test_double_backward(device, activation):
    x = torch.randn(6, 20, device=device, requires_grad=True)
    w = torch.randn(9, 20, device=device, requires_grad=True)
    (gx,) = torch.autograd.grad(linear_tf32(x, w, None, activation, precision="ieee").sum(), x, create_graph=True)
    (ggw,) = torch.autograd.grad(gx.square().sum(), w)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    (gx64,) = torch.autograd.grad(ACTIVATIONS[activation](x64 @ w64.T).sum(), x64, create_graph=True)
    (ggw64,) = torch.autograd.grad(gx64.square().sum(), w64)
    torch.testing.assert_close(ggw.double(), ggw64, rtol=1e-4, atol=1e-4)
