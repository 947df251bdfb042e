"""Autograd formulas, torch.library.opcheck, torch.compile and the
precision switch of pygpukit::matmul_tf32."""

import enum
import os
import subprocess
import sys
import unittest.mock

import pytest
import torch

import pygpukit_torch
from pygpukit_torch import matmul_tf32
from pygpukit_torch._settings import innermost
from conftest import DEVICES, HAS_CUDA, opcheck, rel_error, requires_cuda, skip_unless_config_fits

SHAPE_PAIRS = [((5,), (5,)), ((5,), (5, 3)), ((4, 5), (5,)), ((4, 5), (5, 3)), ((3, 4, 5), (5, 6)),
               ((4, 5), (3, 5, 6)), ((2, 1, 4, 5), (3, 5, 6)), ((3, 4, 5), (5,))]


def sample_inputs(device, requires_grad):
    for a_shape, b_shape in SHAPE_PAIRS:
        yield (torch.randn(a_shape, device=device, requires_grad=requires_grad),
               torch.randn(b_shape, device=device, requires_grad=requires_grad))


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_match_torch_matmul(device):
    for a, b in sample_inputs(device, requires_grad=True):
        out = matmul_tf32(a, b)
        grad = torch.randn_like(out)
        ga, gb = torch.autograd.grad(out, (a, b), grad)
        ra, rb = torch.autograd.grad(torch.matmul(a.double(), b.double()), (a, b), grad.double())
        assert ga.shape == a.shape and gb.shape == b.shape
        # Each gradient is itself a TF32 product: ~3e-4 relative error expected.
        assert rel_error(ga, ra) < 2e-3 and rel_error(gb, rb) < 2e-3


@pytest.mark.parametrize("device", DEVICES)
def test_sparse_incoming_gradient(device):
    """backward(gradient=...) with a sparse gradient, which torch.matmul's
    and F.linear's backward take: the same gradients as with its dense form."""
    x = torch.randn(4, 5, device=device, requires_grad=True)
    w = torch.randn(3, 5, device=device, requires_grad=True)
    bias = torch.randn(3, device=device, requires_grad=True)
    grad = torch.randn(4, 3, device=device) * (torch.rand(4, 3, device=device) < 0.5)
    for fn in (lambda: matmul_tf32(x, w.mT), lambda: pygpukit_torch.linear_tf32(x, w, bias, "gelu")):
        dense = torch.autograd.grad(fn(), (x, w), grad)
        sparse = torch.autograd.grad(fn(), (x, w), grad.to_sparse())
        for d, s in zip(dense, sparse):
            assert s.layout == torch.strided
            torch.testing.assert_close(s, d, rtol=0, atol=0)


def test_gradcheck_ieee_cpu():
    # precision="ieee" on the CPU is an FP32-rounded float64 product: a smooth
    # bilinear function, so finite differences with eps 1e-2 agree closely.
    for a, b in sample_inputs("cpu", requires_grad=True):
        assert torch.autograd.gradcheck(lambda x, y: matmul_tf32(x, y, precision="ieee"), (a, b),
                                        eps=1e-2, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_ieee_gradients_are_fp32(device):
    # The backward products run at the forward's precision: with "ieee" the
    # gradients are within FP32 accumulation error (~1e-7 here) of float64,
    # where TF32 products would be ~3e-4 off.
    a = torch.randn(3, 40, 300, device=device, requires_grad=True)
    b = torch.randn(300, 50, device=device, requires_grad=True)
    g = torch.randn(3, 40, 50, device=device)
    ga, gb = torch.autograd.grad(matmul_tf32(a, b, precision="ieee"), (a, b), g)
    a64, b64, g64 = a.detach().double(), b.detach().double(), g.double()
    assert rel_error(ga, g64 @ b64.T) < 2e-6
    assert rel_error(gb, (a64.mT @ g64).sum(0)) < 2e-6


@pytest.mark.parametrize("device", DEVICES)
def test_only_needed_gradients(device):
    a = torch.randn(4, 5, device=device, requires_grad=True)
    b = torch.randn(5, 3, device=device)
    out = matmul_tf32(a, b)
    (ga,) = torch.autograd.grad(out.sum(), (a,))
    assert ga.shape == a.shape


@pytest.mark.parametrize("device", DEVICES)
def test_saves_only_what_backward_needs(device):
    a = torch.randn(4, 5, device=device, requires_grad=True)
    b = torch.randn(5, 3, device=device)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        matmul_tf32(a, b)
        assert len(saved) == 1 and saved[0].data_ptr() == b.data_ptr()  # grad_a = grad @ bᵀ
        with torch.no_grad():
            out = matmul_tf32(a, b)
    assert len(saved) == 1 and out.grad_fn is None and not out.requires_grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(device, requires_grad):
    for a, b in sample_inputs(device, requires_grad):
        opcheck(torch.ops.pygpukit.matmul_tf32.default, (a, b))
        opcheck(torch.ops.pygpukit.matmul_tf32.default, (a, b), {"precision": "ieee"})


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    def f(x, w, v):
        return torch.relu(matmul_tf32(x, w)).sum(-1) + matmul_tf32(x, v)

    # Inductor needs a C++ toolchain per graph on the CPU; aot_eager still traces
    # the op through its meta kernel with fullgraph=True.
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    x, w, v = (torch.randn(8, 16, device=device, requires_grad=True), torch.randn(16, 32, device=device),
               torch.randn(16, device=device))
    out = compiled(x, w, v)
    eager = f(x, w, v)
    torch.testing.assert_close(out, eager, atol=1e-4, rtol=1e-4)
    (eager_grad,) = torch.autograd.grad(eager.sum(), x)
    out.sum().backward()
    # The CPU's aot_eager runs the very same products. Inductor on CUDA may
    # hand them over in other layouts, for which the dispatcher may choose
    # an FP32 GEMV on one side and a TF32 kernel on the other (seen: 2e-3
    # relative at one element): TF32's error at K = 32.
    tol = 0 if device == "cpu" else 5e-3
    torch.testing.assert_close(x.grad, eager_grad, atol=tol, rtol=tol)


def test_torch_compile_fullgraph_with_enum_options():
    # The wrappers' check that a name can reach the operator called
    # str.encode, which Dynamo cannot trace on a str subclass.
    class Option(str, enum.Enum):
        GELU = "gelu"
        IEEE = "ieee"

    def f(x, w):
        return pygpukit_torch.linear_tf32(matmul_tf32(x, w, precision=Option.IEEE), w.T, activation=Option.GELU,
                                          precision=Option.IEEE)

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    compiled = torch.compile(f, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x, w), f(x, w), rtol=0, atol=0)


@requires_cuda
def test_torch_compile_reduce_overhead():
    model = torch.nn.Linear(64, 64).cuda()

    def f(x):
        return matmul_tf32(model(x), model.weight)

    compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):
        x = torch.randn(32, 64, device="cuda")
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), f(x), atol=1e-4, rtol=1e-4)


def _run_python(code, env_extra):
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("device", DEVICES)
def test_env_switch_and_torch_fp32_precision_setting(device):
    # The op ignores PyTorch's TF32 settings: setting the newer
    # fp32_precision API first (which makes the legacy getters raise) must
    # not matter, and PYGPUKIT_ALLOW_TF32=0 must select exact FP32.
    code = f"""
import torch, pygpukit_torch
mm = torch.backends.cuda.matmul
if hasattr(mm, "fp32_precision"):
    mm.fp32_precision = "ieee"
    torch.backends.fp32_precision = "ieee"
x = torch.eye(64, device="{device}") * (1 + 2**-11 + 2**-12)
out = pygpukit_torch.matmul_tf32(x, torch.eye(64, device="{device}"))
print(float(out[0, 0]) - 1)
"""
    tf32 = _run_python(code, {"PYGPUKIT_ALLOW_TF32": "1"})
    ieee = _run_python(code, {"PYGPUKIT_ALLOW_TF32": "0"})
    assert tf32.returncode == 0, tf32.stderr
    assert ieee.returncode == 0, ieee.stderr
    assert float(tf32.stdout) == 2 ** -10
    assert float(ieee.stdout) == 2 ** -11 + 2 ** -12


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_kernel_info_names_a_kernel():
    a, b = torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")
    hopper = torch.cuda.get_device_capability() == (9, 0)
    assert torch.ops.pygpukit.matmul_kernel_info(a, b).startswith("wgmma" if hopper else "mma_sync")
    assert torch.ops.pygpukit.matmul_kernel_info(a, b, precision="ieee").startswith("fma")
    with pygpukit_torch.force_kernel("mma_sync_medium"):
        info = torch.ops.pygpukit.matmul_kernel_info(a, b)
    skip_unless_config_fits(info, "mma_sync 128x128x32", "mma_sync_medium")
    assert info.startswith("mma_sync 128x128x32"), info


def test_kernel_info_on_meta_tensors():
    a, b = torch.empty(64, 32, device="meta"), torch.empty(32, 16, device="meta")
    assert pygpukit_torch.kernel_info(a, b).startswith("none (meta or fake tensors")
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():  # fake tensors that report the CPU
        fake_a, fake_b = torch.empty(64, 32), torch.empty(32, 16)
        assert fake_a.device.type == "cpu"
        assert pygpukit_torch.kernel_info(fake_a, fake_b).startswith("none (meta or fake tensors")
    with pytest.raises(ValueError, match="matmul_tf32: precision must be"):
        pygpukit_torch.kernel_info(a, b, precision="fp16")
    with pytest.raises(RuntimeError, match="matmul_tf32: shapes cannot be multiplied"):
        pygpukit_torch.kernel_info(a, a)


def test_kernel_info_under_torch_compile():
    a, b = torch.randn(8, 4), torch.randn(4, 3)

    def f(x, y):
        return matmul_tf32(x, y), pygpukit_torch.kernel_info(x, y)

    # A graph break (fullgraph first: Dynamo's cache of f's code is shared),
    # so asked of the real tensors, not of the fake ones tracing saw.
    with pytest.raises(RuntimeError, match="matmul_kernel_info"):
        torch.compile(f, backend="aot_eager", fullgraph=True)(a, b)
    _, info = torch.compile(f, backend="aot_eager")(a, b)
    assert info == pygpukit_torch.kernel_info(a, b)


def test_force_kernel_rejects_unknown_names_and_leaves_the_environment_alone():
    before = os.environ.get("PYGPUKIT_KERNEL")
    with pytest.raises(ValueError, match="unknown kernel 'cublas'"):
        with pygpukit_torch.force_kernel("cublas"):
            pass
    with pytest.raises(TypeError, match="kernel must be one of .* or None, got int 1"):
        with pygpukit_torch.force_kernel(1):
            pass
    with pygpukit_torch.force_kernel("fma"):
        assert innermost("kernel") == "fma" and os.environ.get("PYGPUKIT_KERNEL") == before
    assert innermost("kernel") is None


@pytest.mark.parametrize("device", DEVICES)
def test_force_kernel_and_torch_compile(device):
    # Dynamo caches by code object: without a reset the [cuda] case would
    # reuse what the [cpu] case left for f below (run eagerly, no error).
    torch._dynamo.reset()
    a, b = torch.randn(64, 96, device=device), torch.randn(96, 80, device=device)
    # Around the call of a compiled function: the graph's calls reach the
    # dispatcher, which reads the override on every run. On CUDA the FP32
    # kernel's result differs from the TF32 kernels'.
    compiled = torch.compile(lambda x, y: matmul_tf32(x, y), backend="aot_eager", fullgraph=True)
    with pygpukit_torch.force_kernel("fma"):
        assert torch.equal(compiled(a, b), matmul_tf32(a, b))
    assert torch.equal(compiled(a, b), matmul_tf32(a, b))
    if device == "cuda":
        tf32 = matmul_tf32(a, b)  # outside the block: a TF32 tensor-core kernel
        with pygpukit_torch.force_kernel("fma"):
            assert not torch.equal(compiled(a, b), tf32)

    # Inside one: a clear error with fullgraph=True; without, the block runs eagerly.
    def f(x, y):
        with pygpukit_torch.force_kernel("fma"):
            return matmul_tf32(x, y)

    before = os.environ.get("PYGPUKIT_KERNEL")
    with pytest.raises(RuntimeError, match="force_kernel: cannot be used inside a function compiled by torch.compile or traced by torch.export"):
        torch.compile(f, backend="aot_eager", fullgraph=True)(a, b)
    assert os.environ.get("PYGPUKIT_KERNEL") == before
    with pygpukit_torch.force_kernel("fma"):
        expected = matmul_tf32(a, b)
    assert torch.equal(torch.compile(f, backend="aot_eager")(a, b), expected)


def test_torch_compile_data_dependent_batch_size():
    """A batch size known only at run time (a boolean mask's count) broadcasts
    under torch.compile as torch.matmul's does."""
    def f(x, b, mm):
        return mm(x.reshape(10, 1, 1, 4)[x[:, 0] > 0], b)

    x, b = torch.randn(10, 4), torch.randn(3, 4, 2)
    with unittest.mock.patch.object(torch._dynamo.config, "capture_dynamic_output_shape_ops", True):
        torch._dynamo.reset()
        out = torch.compile(f, backend="aot_eager", fullgraph=True)(x, b, matmul_tf32)
    ref = f(x.double(), b.double(), torch.matmul)
    assert out.shape == ref.shape
    assert rel_error(out, ref) < 1e-3


def test_torch_compile_backward_with_a_batch_size_known_only_at_run_time():
    """Gradients of a batch broadcast against a size-1 batch, where the other
    batch size comes from a boolean mask: summed back without a guard on
    the unknown size (torch.matmul compiles the same)."""
    mask = torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.bool)
    x, w = torch.randn(6, 3, 4, requires_grad=True), torch.randn(1, 4, 5, requires_grad=True)
    with unittest.mock.patch.object(torch._dynamo.config, "capture_dynamic_output_shape_ops", True):
        torch._dynamo.reset()
        f = torch.compile(lambda x, m, w: matmul_tf32(x[m], w, precision="ieee"), backend="aot_eager",
                          fullgraph=True)
        f(x, mask, w).sum().backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    torch.matmul(x[mask], w).sum().backward()
    assert rel_error(gx, x.grad) < 1e-5 and rel_error(gw, w.grad) < 1e-5


def test_torch_compile_symbolic_shapes_check_as_eager_mode_does():
    """With symbolic sizes (dynamic=True) the meta kernels give eager mode's
    shapes, and a mismatch met while tracing raises eager mode's message
    (with the sizes' symbols where eager mode has numbers)."""
    mm = torch.compile(lambda a, b: matmul_tf32(a, b), backend="aot_eager", dynamic=True, fullgraph=True)
    lin = torch.compile(lambda x, w, bias: pygpukit_torch.linear_tf32(x, w, bias, "relu"), backend="aot_eager",
                        dynamic=True, fullgraph=True)
    torch._dynamo.reset()
    for n in (3, 5, 6):
        a, b = torch.randn(2, n, 8), torch.randn(8, n + 1)
        assert torch.equal(mm(a, b), matmul_tf32(a, b))
        x, w, bias = torch.randn(n, 2, 16), torch.randn(n + 2, 16), torch.randn(n + 2)
        assert torch.equal(lin(x, w, bias), pygpukit_torch.linear_tf32(x, w, bias, "relu"))
    with pytest.raises(RuntimeError, match=r"matmul_tf32: shapes cannot be multiplied: a has shape \[s\d+, s\d+, s\d+\]"):
        mm(torch.randn(2, 3, 8), torch.randn(9, 4))
    with pytest.raises(RuntimeError, match=r"linear_tf32: expected bias of shape \[s?\d+\]"):
        lin(torch.randn(2, 16), torch.randn(5, 16), torch.randn(4))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_runs_the_ops_in_float32(device, dtype):
    """Inside torch.autocast the ops cast float16/bfloat16 inputs to float32
    and return float32, as ATen's float32-policy ops do; gradients reach the
    inputs in their own dtype; other dtypes still raise; compiled code agrees."""
    a = torch.randn(6, 32, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(5, 32, device=device, requires_grad=True)
    b = torch.randn(5, device=device, dtype=dtype)
    with torch.autocast(device, dtype=dtype):
        mm = matmul_tf32(a, w.mT)
        lin = pygpukit_torch.linear_tf32(a, w, b, "gelu")
        with pytest.raises(RuntimeError, match="expected float32 tensors"):
            matmul_tf32(a.detach().double(), w.detach().double().mT)
        # kernel_info names what the call runs, on the inputs cast up.
        assert pygpukit_torch.kernel_info(a, w.mT) == pygpukit_torch.kernel_info(a.detach().float(), w.mT)
        compiled = torch.compile(lambda x, y: matmul_tf32(x, y), backend="aot_eager", fullgraph=True)
        mm_compiled = compiled(a.detach(), w.detach().mT)
    assert mm.dtype == lin.dtype == mm_compiled.dtype == torch.float32
    assert torch.equal(mm, matmul_tf32(a.detach().float(), w.detach().mT))
    assert torch.equal(mm_compiled, mm.detach())
    assert torch.equal(lin, pygpukit_torch.linear_tf32(a.detach().float(), w.detach(), b.float(), "gelu"))
    (mm.sum() + lin.sum()).backward()
    assert a.grad.dtype == dtype and w.grad.dtype == torch.float32


@pytest.mark.parametrize("device", DEVICES)
def test_forward_mode_ad_raises(device):
    """No forward-AD formula: a tangent must raise, never be dropped (which
    made torch.func.jacfwd return an all-zero Jacobian)."""
    x, w = torch.randn(3, 4, device=device), torch.randn(2, 4, device=device)
    with pytest.raises(NotImplementedError, match="matmul_tf32: forward-mode AD"):
        torch.func.jacfwd(lambda t: pygpukit_torch.matmul_tf32(t, w.mT))(x)
    with pytest.raises(NotImplementedError, match="linear_tf32: forward-mode AD"):
        torch.func.jacfwd(lambda t: pygpukit_torch.linear_tf32(x, w, t))(torch.randn(2, device=device))
