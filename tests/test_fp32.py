"""precision="fp32": FP32-accurate products. On Hopper large products run the
Ozaki scheme on INT8 tensor cores (forced here with force_kernel("ozaki") at
any size); its error must not exceed cuBLAS FP32's, norm-wise and in the
worst element, on every input of the accuracy suite."""

import pytest
import torch

import pygpukit_torch
from conftest import HAS_CUDA, assert_linear_close, assert_matmul_close, poisoned_matmul, requires_cuda
from pygpukit_torch import force_kernel, kernel_info, linear_tf32, matmul_tf32
from pygpukit_torch.testing import matmul_errors


def ozaki_here() -> bool:
    if not HAS_CUDA:
        return False
    a = torch.ones(4, 4, device="cuda")
    with force_kernel("ozaki"):
        return kernel_info(a, a, precision="fp32").startswith("ozaki")


requires_ozaki = pytest.mark.skipif(not ozaki_here(), reason="needs the Ozaki path (sm_90a build, an H100/H200)")


def cublas_fp32(a, b):
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return torch.matmul(a, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed


def _gen(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return lambda *s: torch.randn(*s, device="cuda", generator=g)


def _binades(shape, lo, hi):
    return torch.exp2(torch.randint(lo, hi + 1, shape, device="cuda").float())


def accuracy_cases():
    """(name, a, b) of the accuracy suite."""
    randn = _gen(0)
    for k in (1, 7, 64, 1000, 4096):
        yield f"normal K={k}", randn(192, k), randn(k, 160)
    k = 4096
    yield ("wide 2^+-20", randn(128, k) * _binades((128, k), -20, 20),
           randn(k, 128) * _binades((k, 128), -20, 20))
    a = randn(128, k)
    a[:, 7] = 2.0 ** 40
    yield "one huge per row", a, randn(k, 128)
    x, y = randn(128, k // 2), randn(k // 2, 128)
    yield "cancellation", torch.cat([x, x], 1), torch.cat([y, -y + 1e-3 * randn(k // 2, 128)], 0)
    yield "subnormal a", randn(128, k) * 1e-39, randn(k, 128)
    yield "tiny times big", randn(128, k) * 1e-30, randn(k, 128) * 1e20
    yield "global 2^-100", randn(128, k) * 2.0 ** -100, randn(k, 128) * 2.0 ** -20
    yield "rows 2^30 apart", randn(128, k) * _binades((128, 1), -30, 30), randn(k, 128)
    # Outliers in A's rows and B's columns, at different k and at the same k;
    # at 2^24 the moduli cannot reach FP32's accuracy and every product is
    # computed from the inputs.
    for e in (8, 16, 20, 24):
        a, b = randn(128, k), randn(k, 128)
        a[:, 7], b[9, :] = 2.0 ** e, 2.0 ** e
        yield f"outliers 2^{e} at different k", a, b
    a, b = randn(128, k), randn(k, 128)
    a[:, 7], b[7, :] = 2.0 ** 16, 2.0 ** 16
    yield "outliers 2^16 at the same k", a, b
    a, b = randn(128, k), randn(k, 128)
    a[:, 7:11], b[100:104, :] = 2.0 ** 20, 2.0 ** 20
    yield "four outlier channels 2^20 in each", a, b
    yield "uniform [0, 1)", torch.rand(128, k, device="cuda"), torch.rand(k, 128, device="cuda")


CASES = [c[0] for c in accuracy_cases()] if HAS_CUDA else []


@requires_ozaki
@pytest.mark.parametrize("name", CASES)
def test_ozaki_error_at_most_cublas_fp32(name):
    a, b = next((a, b) for n, a, b in accuracy_cases() if n == name)
    with force_kernel("ozaki"):
        assert kernel_info(a, b, precision="fp32").startswith("ozaki")
        out = poisoned_matmul(a, b, precision="fp32")
    ours, theirs = matmul_errors(out, a, b), matmul_errors(cublas_fp32(a, b), a, b)
    assert ours.norm <= theirs.norm and ours.worst <= theirs.worst, (name, ours, theirs)


@requires_ozaki
def test_ozaki_long_k_reduces_between_chunks():
    """K = 2^20: the INT32 accumulators are reduced modulo p every 2^16 of K."""
    randn = _gen(1)
    a, b = randn(16, 1 << 20), randn(1 << 20, 24)
    with force_kernel("ozaki"):
        out = poisoned_matmul(a, b, precision="fp32")
    ours, theirs = matmul_errors(out, a, b), matmul_errors(cublas_fp32(a, b), a, b)
    assert ours.norm <= theirs.norm and ours.worst <= theirs.worst, (ours, theirs)


@requires_ozaki
def test_ozaki_nonfinite_inputs_propagate_as_in_fp32():
    randn = _gen(2)
    a, b = randn(64, 300), randn(300, 48)
    a[3, 5] = float("inf")
    a[7, 1] = float("nan")
    a[9, 2] = float("-inf")
    b[2, 11] = 0.0  # -inf * 0 = nan in column 11 of row 9
    b[4, 20] = float("inf")
    with force_kernel("ozaki"):
        out = poisoned_matmul(a, b, precision="fp32")
    ref = cublas_fp32(a, b)
    assert torch.equal(out.isnan(), ref.isnan())
    assert torch.equal(out.isposinf(), ref.isposinf()) and torch.equal(out.isneginf(), ref.isneginf())
    finite = ref.isfinite()
    torch.testing.assert_close(out[finite], ref[finite], rtol=1e-5, atol=1e-5)


@requires_ozaki
def test_ozaki_zero_rows_and_columns_give_exact_zeros():
    randn = _gen(3)
    a, b = randn(40, 50), randn(50, 30)
    a[5] = 0
    b[:, 7] = 0
    with force_kernel("ozaki"):
        out = poisoned_matmul(a, b, precision="fp32")
        zero = poisoned_matmul(torch.zeros(8, 9, device="cuda"), torch.zeros(9, 10, device="cuda"), precision="fp32")
    assert (out[5] == 0).all() and (out[:, 7] == 0).all() and (zero == 0).all()
    assert_matmul_close(out, a, b, "fp32")


@requires_ozaki
@pytest.mark.parametrize("shape", [(1, 1, 1), (1000, 333, 77), (257, 513, 129), (5, 3000, 2000), (300, 7, 4099),
                                   (1300, 700, 300)])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_ozaki_shapes_and_layouts(shape, layout):
    m, n, k = shape
    randn = _gen(4)
    a = randn(k, m).t() if layout[0] == "t" else randn(m, k)
    b = randn(n, k).t() if layout[1] == "t" else randn(k, n)
    with force_kernel("ozaki"):
        out = poisoned_matmul(a, b, precision="fp32")
    assert_matmul_close(out, a, b, "fp32")
    ours, theirs = matmul_errors(out, a, b), matmul_errors(cublas_fp32(a, b), a, b)
    assert ours.norm <= max(theirs.norm, 2.0 ** -24), (ours, theirs)


@requires_ozaki
def test_ozaki_batched_and_broadcast():
    randn = _gen(5)
    a, b, w = randn(3, 200, 300), randn(3, 300, 100), randn(300, 100)
    with force_kernel("ozaki"):
        out = poisoned_matmul(a, b, precision="fp32")
        shared = poisoned_matmul(a, w, precision="fp32")
        left = poisoned_matmul(randn(200, 300), b, precision="fp32")
    assert_matmul_close(out, a, b, "fp32")
    assert_matmul_close(shared, a, w, "fp32")
    assert left.shape == (3, 200, 100)


@requires_ozaki
@pytest.mark.parametrize("activation", ["none", "relu", "gelu", "silu"])
def test_ozaki_linear_bias_and_activation(activation):
    randn = _gen(6)
    x, w, bias = randn(300, 256), randn(384, 256), randn(384)
    with force_kernel("ozaki"):
        assert kernel_info(x, w.t(), precision="fp32").startswith("ozaki")
        out = linear_tf32(x, w, bias, activation, precision="fp32")
    assert_linear_close(out, x, w, bias, activation, precision="fp32")


@requires_ozaki
def test_ozaki_is_deterministic_and_graph_safe():
    randn = _gen(7)
    a, b = randn(512, 640), randn(640, 384)
    with force_kernel("ozaki"):
        first = matmul_tf32(a, b, precision="fp32")
        assert torch.equal(first, matmul_tf32(a, b, precision="fp32"))
        a_in, b_in = a.clone(), b.clone()
        graph = torch.cuda.CUDAGraph()
        matmul_tf32(a_in, b_in, precision="fp32")  # warm-up outside capture
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            out = matmul_tf32(a_in, b_in, precision="fp32")
    # New inputs of another exponent spread: the moduli count is chosen again at replay.
    a_in.copy_(randn(512, 640) * _binades((512, 640), -20, 20))
    b_in.copy_(randn(640, 384))
    graph.replay()
    torch.cuda.synchronize()
    ours, theirs = matmul_errors(out, a_in, b_in), matmul_errors(cublas_fp32(a_in, b_in), a_in, b_in)
    assert ours.norm <= theirs.norm and ours.worst <= theirs.worst, (ours, theirs)


@requires_ozaki
def test_fp32_dispatch_takes_ozaki_for_large_products_only():
    big = torch.empty(4096, 4096, device="cuda")
    small = torch.empty(64, 64, device="cuda")
    assert kernel_info(big, big, precision="fp32").startswith("ozaki")
    assert kernel_info(small, small, precision="fp32").startswith("FP32-accurate by")


@requires_cuda
@pytest.mark.parametrize("shape", [(1, 64, 32), (17, 100, 50), (128, 1500, 256)])
def test_fp32_small_products_meet_the_fp32_bound(shape):
    m, n, k = shape
    randn = _gen(8)
    a, b = randn(m, k), randn(k, n)
    out = poisoned_matmul(a, b, precision="fp32")
    assert_matmul_close(out, a, b, "fp32")


def test_fp32_on_cpu_is_the_float64_product_rounded():
    a, b = torch.randn(33, 65), torch.randn(65, 17)
    out = matmul_tf32(a, b, precision="fp32")
    assert torch.equal(out, (a.double() @ b.double()).float())
    assert "FP32-accurate" in pygpukit_torch.kernel_info(a, b, precision="fp32")


def test_fp32_autograd_on_cpu():
    a = torch.randn(6, 5, dtype=torch.float32, requires_grad=True)
    b = torch.randn(5, 4, dtype=torch.float32, requires_grad=True)
    matmul_tf32(a, b, precision="fp32").sum().backward()
    torch.testing.assert_close(a.grad, torch.ones(6, 4) @ b.detach().t())
    torch.testing.assert_close(b.grad, a.detach().t() @ torch.ones(6, 4))
