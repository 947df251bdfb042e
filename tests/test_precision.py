"""precision="tf32x3" (3xTF32) on every path, and the ways to select a
precision: the argument, PYGPUKIT_PRECISION, pygpukit_torch.default_precision."""

import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import pygpukit_torch
from pygpukit_torch import linear_tf32, matmul_tf32
from pygpukit_torch._settings import innermost
from pygpukit_torch.testing import cublas_tf32
from conftest import (CUDA_KERNELS, DEVICE_KERNELS, DEVICES, aligned_rows, assert_matmul_close,
                      error_bound, kernel_runs_here, matmul_reference, opcheck, poison_next_output,
                      poisoned_matmul, rel_error, requires_cuda, tf32x3_norm_bound)


def run(a, b, precision="tf32x3"):
    return poisoned_matmul(a, b, precision)


def wide_range(rows, cols, device, generator=None):
    """Values whose magnitudes span 2^-20 to 2^20: where splitting matters."""
    signs = torch.randn(rows, cols, generator=generator).sign()
    exponents = torch.empty(rows, cols).uniform_(-20, 20, generator=generator)
    return (signs * torch.exp2(exponents)).to(device)


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (17, 33, 65), (127, 129, 131), (256, 256, 256),
                                   (37, 45, 7), (1, 300, 1000), (300, 1, 513)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_tf32x3_values(device, kernel, m, n, k, layout):
    a = torch.randn(m, k, device=device) if layout[0] == "n" else torch.randn(k, m, device=device).t()
    b = torch.randn(k, n, device=device) if layout[1] == "n" else torch.randn(n, k, device=device).t()
    assert_matmul_close(run(a, b), a, b, precision="tf32x3")


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
def test_tf32x3_is_far_more_accurate_than_tf32(device, kernel):
    a, b = torch.randn(300, 700, device=device), torch.randn(700, 200, device=device)
    ref = matmul_reference(a, b)
    x3, tf32 = rel_error(run(a, b), ref), rel_error(run(a, b, "tf32"), ref)
    assert x3 < 2e-6 and x3 < tf32 / 50, (x3, tf32)


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
def test_tf32x3_wide_dynamic_range(device, kernel):
    g = torch.Generator().manual_seed(0)
    a, b = wide_range(130, 257, device, g), wide_range(257, 70, device, g)
    out = run(a, b)
    assert (out - matmul_reference(a, b)).abs().le(error_bound(a, b, "tf32x3")).all()
    assert rel_error(out, matmul_reference(a, b)) < 1e-6


@requires_cuda
@pytest.mark.parametrize("kernel", CUDA_KERNELS)
@pytest.mark.parametrize("m,n,k", [(256, 256, 256), (1024, 1024, 1024), (4096, 4096, 4096),
                                   (4095, 4097, 4099), (2048, 512, 8192), (16, 4096, 4096)])
@pytest.mark.parametrize("inputs", ["randn", "wide"])
def test_tf32x3_norm_error(kernel, m, n, k, inputs):
    a, b = (torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")) if inputs == "randn" else \
        (wide_range(m, k, "cuda"), wide_range(k, n, "cuda"))
    ours = rel_error(run(a, b), matmul_reference(a, b))
    assert ours <= tf32x3_norm_bound(k), (ours, tf32x3_norm_bound(k))


@requires_cuda
@pytest.mark.parametrize("kernel", CUDA_KERNELS)
@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (4095, 4097, 4099), (2048, 2048, 8192)])
def test_tf32x3_at_most_cublas_fp32_error(kernel, m, n, k):
    """The issue's accuracy bar, from 4096^3 up: no larger than cuBLAS FP32
    on the same inputs. Kernels that promote their accumulators (every
    3xTF32 configuration of the wgmma and mma.sync paths) must meet it; one
    that does not (one 3K-long tensor-core chain) would be reported as xfail
    with the numbers.
    (Below K of a few hundred, 3xTF32 is inherently less accurate than FP32,
    see NVIDIA/cutlass#729; 256^3 measured 3.4e-7 vs cuBLAS FP32's 1.5e-7.)"""
    a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
    ref = matmul_reference(a, b)
    ours = rel_error(run(a, b), ref)
    with cublas_tf32(False):
        fp32 = rel_error(torch.matmul(a, b), ref)
    if "promoted" not in pygpukit_torch.kernel_info(a, b, precision="tf32x3") and ours > fp32:
        pytest.xfail(f"known gap: this path does not promote its accumulators; "
                     f"3xTF32 error {ours:.2e} > cuBLAS FP32 {fp32:.2e}")
    assert ours <= fp32, (ours, fp32)


@requires_cuda
def test_tf32x3_on_the_compact_mma_sync_tiles_promotes():
    """The 3-stage mma.sync tiles that GPUs with 99 KB of shared memory per
    block run (forced here): 3xTF32 keeps its promotion, and cuBLAS FP32's
    accuracy."""
    a, b = torch.randn(2048, 4096, device="cuda"), torch.randn(4096, 1024, device="cuda")
    with pygpukit_torch.force_kernel("mma_sync_compact"):
        info = pygpukit_torch.kernel_info(a, b, precision="tf32x3")
        out = poisoned_matmul(a, b, precision="tf32x3")
    assert "mma_sync 128x128x32 warp 64x32 stages 3 promoted every 4 k-tiles" in info, info
    ref = matmul_reference(a, b)
    with cublas_tf32(False):
        fp32 = rel_error(torch.matmul(a, b), ref)
    assert rel_error(out, ref) <= fp32


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
def test_tf32x3_nan_inf_like_torch(device, kernel):
    a, b = torch.randn(64, 48, device=device), torch.randn(48, 40, device=device)
    a[3, 5], a[10, 7], b[2, 9], b[20, 30] = float("nan"), float("inf"), float("-inf"), float("inf")
    a[11, :], b[:, 31] = 0.0, 0.0
    a[11, 20] = float("inf")  # inf * finite and 0 * inf
    b[5, :] = 1.0  # exactly TF32: small part 0, so inf * small would be NaN if not guarded
    a[40, 5] = float("inf")
    out = poisoned_matmul(a, b, precision="tf32x3")  # an unwritten element shows as NaN
    ref = torch.matmul(a.double(), b.double())
    assert torch.equal(out.isnan(), ref.isnan())
    assert torch.equal(out.isinf() & (out > 0), ref.isinf() & (ref > 0))
    assert torch.equal(out.isinf() & (out < 0), ref.isinf() & (ref < 0))


# What kernel_info names when the Hopper kernel splits the weight itself.
WEIGHT_SPLIT_IN_REGISTERS = "3xTF32 (B split into big and small TF32 parts in registers, A's packed) on wgmma"


def on_split3_kernel(x, w):
    """Forces the wgmma path for `x @ w` and checks that the weight-splitting
    kernel (WgmmaSplit3SwapAB) is what runs; skips off Hopper."""
    if not kernel_runs_here("wgmma"):
        pytest.skip("the wgmma path does not run on this GPU")
    info = pygpukit_torch.kernel_info(x, w, precision="tf32x3")
    assert info.startswith(WEIGHT_SPLIT_IN_REGISTERS), info


def weight(n, k, layout):
    """A weight W for `x @ W`: stored [in, out] (row-major) or as nn.Linear's
    [out, in] and transposed (column-major), its rows 16-byte aligned for
    any k (a view of rows padded to a multiple of 4), as TMA reads it in
    place."""
    if layout == "row-major":
        return torch.randn(k, n, device="cuda")
    return aligned_rows(n, k).t()


@requires_cuda
@pytest.mark.parametrize("layout", ["row-major", "column-major"])
@pytest.mark.parametrize("m", [1, 17, 64, 100, 128])
@pytest.mark.parametrize("n,k", [(700, 1000), (256, 4099), (4096, 4096)])
def test_tf32x3_weight_split_in_registers(m, n, k, layout):
    """`x @ W`, M <= 128: the Hopper kernel reads W in place as FP32 (either
    layout), splits it in registers and packs only x's parts. K not a
    multiple of 32 ends in a part-filled k-tile; N = 700 ends inside a tile;
    M = 17 inside the 64-row tile (M <= 64), 100 inside the 128-row one."""
    x, w = torch.randn(m, k, device="cuda"), weight(n, k, layout)
    with pygpukit_torch.force_kernel("wgmma"):
        on_split3_kernel(x, w)
        out = run(x, w)
    assert_matmul_close(out, x, w, precision="tf32x3")
    assert rel_error(out, matmul_reference(x, w)) <= tf32x3_norm_bound(k)


@requires_cuda
@pytest.mark.parametrize("layout", ["row-major", "column-major"])
@pytest.mark.parametrize("x_kind", ["column-major", "misaligned"])
@pytest.mark.parametrize("m", [1, 17, 100])
def test_tf32x3_weight_split_any_x(m, x_kind, layout):
    """x is packed per call, so the weight-splitting kernel takes x in
    either layout and at any alignment: a column-major x (x^T stored; sent
    to the staged path until 2026-12-01) and a view one float into its rows.
    K = 4099 ends in a part-filled k-tile."""
    k, n = 4099, 700
    if x_kind == "column-major":
        x = torch.randn(k, m, device="cuda").t()
    else:
        x = torch.randn(m, k + 1, device="cuda")[:, 1:]
    w = weight(n, k, layout)
    with pygpukit_torch.force_kernel("wgmma"):
        on_split3_kernel(x, w)
        if x_kind == "column-major" and m > 1:
            assert "A column-major" in pygpukit_torch.kernel_info(x, w, precision="tf32x3")
        out = run(x, w)
    assert_matmul_close(out, x, w, precision="tf32x3")
    assert rel_error(out, matmul_reference(x, w)) <= tf32x3_norm_bound(k)


@requires_cuda
def test_tf32x3_weight_split_at_most_cublas_fp32_error():
    """The accuracy bar on the weight-splitting kernel at decode shapes, both
    weight layouts: no larger than cuBLAS FP32 on the same random inputs.
    On wide-range inputs (2^-20 to 2^20) a few products dominate every sum
    and both errors sit at FP32's rounding floor (H200: 1.50e-7 against
    cuBLAS FP32's 1.47e-7), so there the bar is 1.25x cuBLAS FP32."""
    cases = [(torch.randn(64, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda"), 1.0),
             (torch.randn(100, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda").t(), 1.0),
             (wide_range(100, 4096, "cuda"), wide_range(4096, 1024, "cuda"), 1.25),
             (wide_range(64, 4096, "cuda"), wide_range(1024, 4096, "cuda").t(), 1.25)]
    for x, w, factor in cases:
        with pygpukit_torch.force_kernel("wgmma"):
            on_split3_kernel(x, w)
            out = run(x, w)
        ref = matmul_reference(x, w)
        with cublas_tf32(False):
            fp32 = rel_error(torch.matmul(x, w), ref)
        assert rel_error(out, ref) <= factor * fp32, (rel_error(out, ref), fp32)


@requires_cuda
@pytest.mark.parametrize("layout", ["row-major", "column-major"])
@pytest.mark.parametrize("m", [40, 100])
def test_tf32x3_weight_split_special_values(layout, m):
    """Inf, NaN and values near FLT_MAX in the weight (which send their
    warp's k-tile to the split's long form) and in x: the same NaN and Inf
    pattern as the float64 product, and every output they do not reach
    bitwise what it is without them (both forms give ordinary values the
    same parts). Entries of W exact in TF32 (small part 0) meet x's Inf:
    Inf * small would be NaN if corr did not guard it. The last k-tile is
    part-filled (K = 300), so its rows past K meet x's parts at zero only.
    M = 40 runs the 64-row tile, 100 the 128-row one. Last, FLT_MAX * 1 stays
    finite: big + small must not round up to 2^128."""
    n, k = 256, 300
    x, w = torch.randn(m, k, device="cuda"), weight(n, k, layout)
    w[5, :] = 1.0
    x[:, 100] *= 2.0 ** -10  # its products with W's FLT_MAX below stay far from overflow
    with pygpukit_torch.force_kernel("wgmma"):
        on_split3_kernel(x, w)
        plain = run(x, w)
        x2, w2 = x.clone(), w.clone()
        x2[3, 5], x2[10, 299], w2[7, 9], w2[298, 30] = float("inf"), float("nan"), float("-inf"), float("inf")
        w2[100, 200] = torch.finfo(torch.float32).max  # split truncated, so big stays finite
        x2[11, :] = 0.0
        x2[11, 7] = float("inf")  # inf * finite and 0 * inf
        out = run(x2, w2)
    ref = matmul_reference(x2, w2)
    assert torch.equal(out.isnan(), ref.isnan())
    assert torch.equal(out.isinf() & (out > 0), ref.isinf() & (ref > 0))
    assert torch.equal(out.isinf() & (out < 0), ref.isinf() & (ref < 0))
    finite = ref.isfinite()
    torch.testing.assert_close(out.double()[finite], ref[finite], rtol=1e-5, atol=1e-4)
    rows = [r for r in range(m) if r not in (3, 10, 11)]
    cols = [c for c in range(n) if c not in (9, 30, 200)]
    assert torch.equal(out[rows][:, cols], plain[rows][:, cols])
    fmax = torch.finfo(torch.float32).max
    x.zero_()
    x[:, 0] = 1.0
    w.zero_()
    w[0, 0] = fmax
    with pygpukit_torch.force_kernel("wgmma"):
        got = run(x, w)
    assert torch.isfinite(got).all() and float(got[:, 0].min()) == pytest.approx(fmax, rel=1e-6), got[:, 0]


@requires_cuda
def test_tf32x3_weight_split_batched_and_deterministic_over_500_calls():
    """A batch of weights (no split-K), and one weight whose K is cut into
    split-K ranges (32 on the H200) whose partial sums add in fixed order:
    bitwise the same over 500 calls."""
    x, w = torch.randn(3, 50, 300, device="cuda"), torch.randn(3, 300, 200, device="cuda")
    with pygpukit_torch.force_kernel("wgmma"):
        on_split3_kernel(x, w)
        assert_matmul_close(run(x, w), x, w, precision="tf32x3")
    x, w = torch.randn(64, 4096, device="cuda"), torch.randn(4096, 512, device="cuda")
    with pygpukit_torch.force_kernel("wgmma"):
        on_split3_kernel(x, w)
        assert "split-K" in pygpukit_torch.kernel_info(x, w, precision="tf32x3")
        first = run(x, w)
        for _ in range(500):
            assert torch.equal(run(x, w), first)


@requires_cuda
@pytest.mark.parametrize("n,k", [(1001, 512), (8501, 64)])
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_linear_tf32x3_weight_split_epilogue(n, k, activation):
    """linear_tf32 (F.linear's weight [out, in]) on the weight-splitting
    kernel with bias and activation: applied by the split-K reduction (N =
    1001) and by the kernel's own transposed epilogue (N = 8501: enough
    tiles that K is not split). N odd: C's rows are not 16-byte aligned, so
    that epilogue copies out with its threads instead of a TMA store."""
    x, w, b = torch.randn(70, k, device="cuda"), torch.randn(n, k, device="cuda"), torch.randn(n, device="cuda")
    with pygpukit_torch.force_kernel("wgmma"):
        on_split3_kernel(x, w.t())
        assert ("split-K" in pygpukit_torch.kernel_info(x, w.t(), precision="tf32x3")) == (n == 1001)
        poison_next_output((70, n), "cuda")
        out = linear_tf32(x, w, b, activation, precision="tf32x3")
    ref = F.linear(x.double(), w.double(), b.double())
    ref = F.gelu(ref) if activation == "gelu" else ref
    assert rel_error(out, ref) < 1e-6


@pytest.mark.parametrize("device", DEVICES)
def test_tf32x3_near_float_max_stays_finite(device):
    # FLT_MAX rounds to Inf in TF32; the split keeps big finite (truncating),
    # so finite products stay finite and exact sums stay exact. On CUDA the
    # mma.sync path is forced: at these few rows the automatic choice is an
    # FP32 GEMV, which splits nothing; forced, both operands are packed.
    fmax = torch.finfo(torch.float32).max
    a = torch.full((4, 8), fmax, device=device)
    b = torch.full((8, 4), 2.0 ** -10, device=device)
    c = torch.tensor([[fmax, 1.0]], device=device)
    d = torch.tensor([[0.0], [1.0]], device=device)
    with pygpukit_torch.force_kernel("mma_sync"):
        if device == "cuda":
            assert "3K columns" in pygpukit_torch.kernel_info(a, b, precision="tf32x3")
            assert "3K columns" in pygpukit_torch.kernel_info(c, d, precision="tf32x3")
        out = matmul_tf32(a, b, precision="tf32x3")
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), matmul_reference(a, b), rtol=1e-6, atol=0)
        assert float(matmul_tf32(c, d, precision="tf32x3")) == 1.0
        # FLT_MAX * 1: big + small must not round up to 2^128 (Inf).
        e, one = torch.tensor([[fmax]], device=device), torch.ones(1, 1, device=device)
        for x, y in ((e, one), (one, e), (-e, one)):
            got = matmul_tf32(x, y, precision="tf32x3")
            assert torch.isfinite(got).all(), (x, y, got)
            torch.testing.assert_close(got.double(), matmul_reference(x, y), rtol=1e-6, atol=0)
        assert torch.isfinite(linear_tf32(one, e, precision="tf32x3")).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_linear_tf32x3(device, activation):
    x, w, b = torch.randn(5, 33, 300, device=device), torch.randn(70, 300, device=device), torch.randn(70, device=device)
    out = linear_tf32(x, w, b, activation, precision="tf32x3")
    ref = F.linear(x.double(), w.double(), b.double())
    ref = F.gelu(ref) if activation == "gelu" else ref
    assert rel_error(out, ref) < 2e-6


@pytest.mark.parametrize("device", DEVICES)
def test_tf32x3_gradients(device):
    a = torch.randn(40, 70, device=device, requires_grad=True)
    b = torch.randn(70, 30, device=device, requires_grad=True)
    matmul_tf32(a, b, precision="tf32x3").square().sum().backward()
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    (a64 @ b64).square().sum().backward()
    assert rel_error(a.grad, a64.grad) < 1e-5 and rel_error(b.grad, b64.grad) < 1e-5


@pytest.mark.parametrize("device", DEVICES)
def test_tf32x3_opcheck(device):
    a, b = torch.randn(9, 13, device=device, requires_grad=True), torch.randn(13, 6, device=device)
    opcheck(torch.ops.pygpukit.matmul_tf32.default, (a, b), {"precision": "tf32x3"})


@pytest.mark.parametrize("device", DEVICES)
def test_default_precision_context_manager(device):
    a, b = torch.randn(64, 300, device=device), torch.randn(300, 50, device=device)
    ref = matmul_reference(a, b)
    with pygpukit_torch.default_precision("tf32x3"):
        inside = rel_error(matmul_tf32(a, b), ref)
        assert "3xTF32" in pygpukit_torch.kernel_info(a, b)
    assert "PYGPUKIT_PRECISION" not in os.environ
    assert inside < 2e-6 < rel_error(matmul_tf32(a, b), ref)
    with pytest.raises(ValueError, match="unknown precision 'fp64'"):
        with pygpukit_torch.default_precision("fp64"):
            pass
    with pytest.raises(TypeError, match="precision must be one of .* or None, got int 1"):  # as the operators'
        with pygpukit_torch.default_precision(1):
            pass
    # None, as for the operators' argument: the default in force stays.
    with pygpukit_torch.default_precision("tf32x3"):
        with pygpukit_torch.default_precision(None):
            assert rel_error(matmul_tf32(a, b), ref) < 2e-6
    with pygpukit_torch.default_precision(None):
        assert rel_error(matmul_tf32(a, b), ref) > 2e-6
    assert "PYGPUKIT_PRECISION" not in os.environ
    # force_kernel(None) likewise changes nothing.
    with pygpukit_torch.force_kernel("fma"):
        with pygpukit_torch.force_kernel(None):
            assert innermost("kernel") == "fma"
    with pygpukit_torch.force_kernel(None):
        assert innermost("kernel") is None


def test_default_precision_and_torch_compile():
    x, eye = torch.eye(8) * (1 + 2 ** -11 + 2 ** -12), torch.eye(8)
    ieee, default = matmul_tf32(x, eye, precision="ieee"), matmul_tf32(x, eye)
    assert not torch.equal(ieee, default)
    # Around the call of a compiled function: the graph reads the default on every run.
    compiled = torch.compile(lambda a, b: matmul_tf32(a, b), backend="aot_eager", fullgraph=True)
    with pygpukit_torch.default_precision("ieee"):
        assert torch.equal(compiled(x, eye), ieee)
    assert torch.equal(compiled(x, eye), default)

    # Inside one: Dynamo cannot trace the environment write, so a clear error
    # with fullgraph=True, and the block runs eagerly without it.
    def f(a, b):
        with pygpukit_torch.default_precision("ieee"):
            return matmul_tf32(a, b)

    with pytest.raises(RuntimeError, match="default_precision: cannot be used inside a function compiled by torch.compile or traced by torch.export.*"
                                           "pass precision='ieee'"):
        torch.compile(f, backend="aot_eager", fullgraph=True)(x, eye)
    assert "PYGPUKIT_PRECISION" not in os.environ
    assert torch.equal(torch.compile(f, backend="aot_eager")(x, eye), ieee)


ENV_PROBE = ("import torch, pygpukit_torch\n"
             "x = torch.eye(8) * (1 + 2**-11 + 2**-12)\n"
             "print(float(pygpukit_torch.matmul_tf32(x, torch.eye(8))[0, 0]) - 1)\n")


def run_probe_in_processes(envs):
    """ENV_PROBE in a fresh interpreter per environment, all started at once
    (each spends seconds importing torch); (returncode, stdout, stderr) each."""
    procs = [subprocess.Popen([sys.executable, "-c", ENV_PROBE], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for env in envs]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        results.append((proc.returncode, out.decode(), err.decode(errors="replace")))
    return results


def test_allow_tf32_environment_variable_values():
    cases = (("0", 2 ** -11 + 2 ** -12), ("OFF", 2 ** -11 + 2 ** -12), ("no", 2 ** -11 + 2 ** -12),
             ("False", 2 ** -11 + 2 ** -12), (" 0", 2 ** -11 + 2 ** -12), ("off\n", 2 ** -11 + 2 ** -12),
             ("1", 2 ** -10), ("", 2 ** -10))
    envs = []
    for value, _ in cases:
        env = dict(os.environ, PYGPUKIT_ALLOW_TF32=value)
        env.pop("PYGPUKIT_PRECISION", None)
        envs.append(env)
    for (value, expected), (_, out, err) in zip(cases, run_probe_in_processes(envs)):
        assert float(out) == expected, (value, err)


def test_precision_environment_variable():
    envs = [dict(os.environ, PYGPUKIT_PRECISION=value) for value in ("tf32", "tf32x3", "ieee", "fp16")]
    # Bytes that are not UTF-8 are named, escaped (not a UnicodeDecodeError).
    if sys.platform == "linux":
        envs.append({**os.environb, b"PYGPUKIT_PRECISION": b"tf\xff32"})
    results = run_probe_in_processes(envs)
    assert float(results[0][1]) == 2 ** -10
    assert float(results[1][1]) == 2 ** -11 + 2 ** -12
    assert float(results[2][1]) == 2 ** -11 + 2 ** -12
    code, _, err = results[3]
    assert code != 0 and "PYGPUKIT_PRECISION must be one of 'tf32', 'tf32x3', 'fp32', 'ieee', got 'fp16'" in err
    if sys.platform == "linux":
        _, _, err = results[4]
        assert "ValueError" in err and "got 'tf\\xff32'" in err, err


@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_unknown_precision_names_the_choices(device):
    a = torch.randn(4, 4, device=device)
    with pytest.raises(ValueError, match="'tf32', 'tf32x3', 'fp32', 'ieee' or None, got 'fp64'"):
        matmul_tf32(a, a, precision="fp64")


def test_tracers_refuse_a_precision_block_inside_the_traced_code():
    """make_fx and torch.jit.trace record the operator without the block's
    setting: entering the block while they trace is an error naming the
    tracer, not a graph that silently runs at another precision."""
    from torch.fx.experimental.proxy_tensor import make_fx
    x, eye = torch.randn(8, 8), torch.eye(8)

    def f(a, b):
        with pygpukit_torch.default_precision("ieee"):
            return matmul_tf32(a, b)

    with pytest.raises(RuntimeError, match="default_precision: cannot be used inside a function traced by make_fx"):
        make_fx(f)(x, eye)
    with pytest.raises(RuntimeError, match="cannot be used inside a function traced by torch.jit.trace"):
        torch.jit.trace(f, (x, eye))
    assert "PYGPUKIT_PRECISION" not in os.environ
    # torch.export (Dynamo first): the message names it.
    class Model(torch.nn.Module):
        def forward(self, a, b):
            return f(a, b)

    with pytest.raises(Exception, match="default_precision: cannot be used inside a function compiled by torch.compile or traced by torch.export"):
        torch.export.export(Model(), (x, eye))
    assert "PYGPUKIT_PRECISION" not in os.environ
    # Outside the traced code the block works.
    traced = make_fx(lambda a, b: matmul_tf32(a, b))(x, eye)
    with pygpukit_torch.default_precision("ieee"):
        assert torch.equal(traced(x, eye), matmul_tf32(x, eye, precision="ieee"))


def test_wrappers_trace_under_fx_symbolic_trace():
    class Model(torch.nn.Module):
        def forward(self, a, b, w, bias):
            return pygpukit_torch.linear_tf32(matmul_tf32(a, b, precision="ieee"), w, bias, activation="relu")

    a, b, w, bias = torch.randn(4, 6), torch.randn(6, 5), torch.randn(3, 5), torch.randn(3)
    graph = torch.fx.symbolic_trace(Model())
    torch.testing.assert_close(graph(a, b, w, bias), Model()(a, b, w, bias), rtol=0, atol=0)


def test_rel_error_of_a_zero_or_empty_reference_and_of_complex_operands():
    # 0/0 was NaN, so `rel_error(out, ref) < tol` failed on an exact result
    # (an M = 0 product); complex values lost their imaginary part.
    for shape in [(3,), (0, 4)]:
        assert rel_error(torch.zeros(shape), torch.zeros(shape)) == 0.0
    assert rel_error(torch.tensor([0.0, 1e-30]), torch.zeros(2)) == math.inf
    with pytest.raises(TypeError, match=r"rel_error: out is complex \(torch.complex64\)"):
        rel_error(torch.full((3,), 1 + 1j), torch.ones(3))


def test_rel_error_refuses_operands_of_different_shapes():
    # Broadcasting one against the other let a wrong-shaped result pass
    # (rel_error(ones(1), ones(1000)) was 0). conftest's is testing's.
    with pytest.raises(ValueError, match=r"rel_error: out has shape \[1\] but ref has shape \[1000\]"):
        rel_error(torch.ones(1), torch.ones(1000))
    assert rel_error(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 4.0])) == pytest.approx(2 / 17 ** 0.5)
