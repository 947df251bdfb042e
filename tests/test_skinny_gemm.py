"""The decode-sized-M kernel (csrc/cuda/skinny_gemm.cu): x[M, K] @ w[N, K].T
for M <= 16 with both operands K-major and 16-byte aligned. Values against
float64 with NaN-poisoned outputs over the edges of M, N and K, the fused
epilogue of linear_tf32, its rounding, the automatic choice, 3xTF32 and
bitwise determinism."""

import pytest
import torch

import pygpukit_torch
from pygpukit_torch import kernel_info, linear_tf32, matmul_tf32
from conftest import (ACTIVATIONS, HAS_CUDA, assert_linear_close, assert_matmul_close, kernel_runs_here,
                      matmul_reference, poison_next_output, poisoned_matmul, rel_error)

pytestmark = pytest.mark.skipif(not HAS_CUDA or torch.cuda.get_device_capability() < (8, 0),
                                reason="needs a CUDA GPU of compute capability 8.0 or newer")

DECODE_SHAPES = [(m, n, k) for m in (1, 8, 16) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))]


def rows(r, k):
    """A [r, k] matrix whose rows start 16 bytes apart even for odd k: a view
    of [r, k rounded up to 4] (contiguous when k % 4 == 0)."""
    return torch.randn(r, (k + 3) // 4 * 4, device="cuda")[:, :k]


def run_linear(x, w, b, activation):
    poison_next_output((x.shape[0], w.shape[0]), "cuda")
    return linear_tf32(x, w, b, activation)


@pytest.mark.parametrize("k", [1, 3, 4, 5, 31, 32, 33, 1000, 4099])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 100, 4097])
@pytest.mark.parametrize("m", [1, 2, 3, 7, 8, 15, 16])
def test_edges_of_m_n_k(m, n, k):
    x, w = rows(m, k), rows(n, k)
    with pygpukit_torch.force_kernel("skinny"):
        assert kernel_info(x, w.mT).startswith("skinny"), kernel_info(x, w.mT)
        out = poisoned_matmul(x, w.mT)
    assert_matmul_close(out, x, w.mT)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("m,n,k", [(1, 100, 33), (7, 9, 4099), (16, 4097, 1000)])
def test_linear_epilogue(m, n, k, bias, activation):
    x, w = rows(m, k), rows(n, k).div_(k ** 0.5)  # in place: keeps the 16-byte-aligned rows
    b = torch.randn(n, device="cuda") if bias else None
    with pygpukit_torch.force_kernel("skinny"):
        assert kernel_info(x, w.mT).startswith("skinny"), kernel_info(x, w.mT)
        out = run_linear(x, w, b, activation)
    assert_linear_close(out, x, w, b, activation)


def wide_n(extra):
    """An N at which the skinny kernel takes its 32-column tile (two of its
    CTAs per SM), plus `extra` columns."""
    return 2 * 32 * torch.cuda.get_device_properties(0).multi_processor_count + extra


@pytest.mark.parametrize("k", [1, 33, 1000])
@pytest.mark.parametrize("extra", [0, 9, 17, 31])  # last CTA: 32, 9, 17 or 31 columns
@pytest.mark.parametrize("m", [1, 7, 16])
def test_wide_tile_edges(m, extra, k):
    x, w = rows(m, k), rows(wide_n(extra), k)
    for kernel in ("auto", "skinny"):
        with pygpukit_torch.force_kernel(kernel):
            assert kernel_info(x, w.mT).startswith("skinny 16x32x32"), kernel_info(x, w.mT)
            out = poisoned_matmul(x, w.mT)
        assert_matmul_close(out, x, w.mT)


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
def test_wide_tile_linear_epilogue(activation):
    x, w = rows(16, 512), rows(wide_n(17), 512).div_(512 ** 0.5)
    b = torch.randn(w.shape[0], device="cuda")
    assert kernel_info(x, w.mT).startswith("skinny 16x32x32"), kernel_info(x, w.mT)
    assert_linear_close(run_linear(x, w, b, activation), x, w, b, activation)
    # 3xTF32 keeps the 16-column tile
    assert "on skinny 16x16x32" in kernel_info(x, w.mT, precision="tf32x3")


@pytest.mark.parametrize("m,n,k", DECODE_SHAPES)
def test_chosen_for_decode_shapes(m, n, k):
    # Above M = 8 on Hopper, weights larger than 4096 x 4096 take the wgmma
    # path (dispatch.cu, kSkinnyOverWgmmaMaxM).
    x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
    expected = "wgmma" if m > 8 and n * k > 4096 * 4096 and kernel_runs_here("wgmma") else "skinny"
    assert kernel_info(x, w.mT).startswith(expected), kernel_info(x, w.mT)
    assert_matmul_close(poisoned_matmul(x, w.mT), x, w.mT)
    assert "on skinny" in kernel_info(x, w.mT, precision="tf32x3")


def round_tf32(t):
    """t rounded to TF32 as the kernels do: to nearest, ties away from zero
    (finite values)."""
    return ((t.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


@pytest.mark.parametrize("m,n,k", DECODE_SHAPES)
def test_error_is_tf32_rounding(m, n, k):
    """The error is that of rounding the inputs to nearest (~3e-4 on randn,
    as cuBLAS TF32), not more: truncation would be ~2.6x larger. On Hopper
    the M = 16 cases with the larger weights run the wgmma path (split-K),
    whose margin then also covers the tensor cores' accumulation."""
    x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
    ref = matmul_reference(x, w.mT)
    rounded = rel_error(matmul_reference(round_tf32(x), round_tf32(w).mT), ref)
    ours = rel_error(matmul_tf32(x, w.mT), ref)
    assert ours <= 1.05 * rounded, (ours, rounded)


def test_folded_batch_and_vector_x():
    # x[2, 4, K] over one weight folds into M = 8; a 1-D x is M = 1 (leading
    # dimension 0), which serves any K, here odd, without padding.
    w = rows(300, 4099)
    x3 = torch.randn(2, 4, 4100, device="cuda")[..., :4099]
    x1 = torch.randn(4099, device="cuda")
    for x in (x3, x1):
        assert kernel_info(x, w.mT).startswith("skinny"), kernel_info(x, w.mT)
        assert_matmul_close(poisoned_matmul(x, w.mT), x, w.mT)


@pytest.mark.parametrize("m,n,k", [(16, 4096, 4096), (1, 4097, 4099), (5, 300, 33)])
def test_tf32x3_splits_in_registers(m, n, k):
    """3xTF32 on the skinny kernel: the operands are split in registers (no
    pack), and the error is 3xTF32's, not TF32's."""
    x, w = rows(m, k), rows(n, k)
    info = kernel_info(x, w.mT, precision="tf32x3")
    assert "in registers" in info and "on skinny" in info, info
    out = poisoned_matmul(x, w.mT, "tf32x3")
    assert_matmul_close(out, x, w.mT, precision="tf32x3")
    assert rel_error(out, matmul_reference(x, w.mT)) < 1e-6


def test_tf32x3_in_registers_special_values():
    """Inf and NaN as torch.matmul gives them (no 0 * Inf from a correction
    term), and values near FLT_MAX stay finite (big is truncated, not rounded
    to Inf)."""
    x, w = rows(12, 48), rows(40, 48)
    x[3, 5], x[10, 7], w[9, 2], w[30, 20] = float("nan"), float("inf"), float("-inf"), float("inf")
    x[11, :], w[31, :] = 0.0, 0.0
    x[11, 20] = float("inf")
    w[:, 5] = 1.0  # exactly TF32: its small part is 0
    assert "in registers" in kernel_info(x, w.mT, precision="tf32x3")
    out, ref = matmul_tf32(x, w.mT, precision="tf32x3"), torch.matmul(x.double(), w.mT.double())
    assert torch.equal(out.isnan(), ref.isnan())
    assert torch.equal(out.isinf() & (out > 0), ref.isinf() & (ref > 0))
    assert torch.equal(out.isinf() & (out < 0), ref.isinf() & (ref < 0))
    fmax = torch.finfo(torch.float32).max
    a, b = torch.full((4, 8), fmax, device="cuda"), torch.full((4, 8), 2.0 ** -10, device="cuda")
    assert "in registers" in kernel_info(a, b.mT, precision="tf32x3")
    big = matmul_tf32(a, b.mT, precision="tf32x3")
    assert torch.isfinite(big).all()
    torch.testing.assert_close(big.double(), matmul_reference(a, b.mT), rtol=1e-6, atol=0)
    c = torch.tensor([[fmax, 1.0, 0.0, 0.0]], device="cuda")
    d = torch.tensor([[0.0, 1.0, 0.0, 0.0]], device="cuda")
    assert float(matmul_tf32(c, d.mT, precision="tf32x3")) == 1.0


@pytest.mark.parametrize("n,k", [(1, 1), (9, 33), (100, 1000), (4097, 4099), (4096, 14336)])
def test_ieee_gemv_on_fp32_fmas(n, k):
    """precision="ieee" with one row of x runs the skinny kernel's FP32 FMA
    variant (B streamed once, no tensor cores): FP32 accuracy, within FP32
    rounding of the FMA kernel's result; two rows go to the FMA kernel."""
    x, w = rows(1, k), rows(n, k)
    info = kernel_info(x, w.mT, precision="ieee")
    assert info.startswith("skinny") and "FP32 FMAs" in info, info
    out = poisoned_matmul(x, w.mT, "ieee")
    assert_matmul_close(out, x, w.mT, precision="ieee")
    assert rel_error(out, matmul_reference(x, w.mT)) < 1e-6
    v = x[0]  # 1-D x: M = 1 as well
    assert "FP32 FMAs" in kernel_info(v, w.mT, precision="ieee")
    torch.testing.assert_close(matmul_tf32(v, w.mT, precision="ieee"), out[0], rtol=0, atol=0)
    with pygpukit_torch.force_kernel("fma"):
        assert kernel_info(x, w.mT, precision="ieee").startswith("fma")
        fma = matmul_tf32(x, w.mT, precision="ieee")
    torch.testing.assert_close(out, fma, rtol=1e-5, atol=1e-5 * float(fma.abs().max()))
    if k >= 1000:  # a different summation order: the call did not run the FMA kernel
        assert not torch.equal(out, fma)
    assert kernel_info(rows(2, k), w.mT, precision="ieee").startswith("fma")


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_ieee_gemv_linear_epilogue_and_special_values(activation):
    x, w = rows(1, 300), rows(70, 300).div_(300 ** 0.5)
    b = torch.randn(70, device="cuda")
    assert "FP32 FMAs" in kernel_info(x, w.mT, precision="ieee")
    poison_next_output((1, 70), "cuda")
    out = linear_tf32(x, w, b, activation, precision="ieee")
    assert_linear_close(out, x, w, b, activation, precision="ieee")
    # NaN and Inf as torch gives them; the zero-filled K tail (300 = 9 * 32 + 12) adds nothing.
    w[2, 5], w[3, 7], w[9, 299] = float("nan"), float("inf"), float("-inf")
    got, ref = matmul_tf32(x, w.mT, precision="ieee"), torch.matmul(x.double(), w.mT.double())
    assert torch.equal(got.isnan(), ref.isnan())
    assert torch.equal(got.isinf() & (got > 0), ref.isinf() & (ref > 0))
    assert torch.equal(got.isinf() & (got < 0), ref.isinf() & (ref < 0))
    assert int(got.isnan().sum()) == 1 and int(got.isinf().sum()) == 2
    torch.testing.assert_close(got[got.isfinite()].double(), ref[ref.isfinite()], rtol=1e-5, atol=1e-5)
    # Inf in x (the operand every lane shares): columns whose weight there is
    # 0 become NaN (inf * 0), the others inf, as in torch; the zero-filled
    # rows past N (inf * 0 too) are never stored.
    x2, w2 = rows(1, 40), rows(70, 40)
    x2[0, 33], w2[:, 33] = float("inf"), 0.0
    w2[:35, 33] = 1.0
    got, ref = matmul_tf32(x2, w2.mT, precision="ieee"), torch.matmul(x2.double(), w2.mT.double())
    assert torch.equal(got.isnan(), ref.isnan()) and torch.equal(got.isinf(), ref.isinf())
    assert int(got.isinf().sum()) == 35 and int(got.isnan().sum()) == 35


@pytest.mark.parametrize("case", ["m17", "x_offset", "w_row_major"])
def test_forced_skinny_falls_back(case):
    x, w = rows(16, 64), rows(40, 64)
    b = w.mT
    if case == "m17":
        x = rows(17, 64)
    elif case == "x_offset":  # base pointer 4 bytes past a 16-byte boundary
        x = torch.randn(16 * 64 + 1, device="cuda")[1:].view(16, 64)
    else:
        b = w.mT.contiguous()
    with pygpukit_torch.force_kernel("skinny"):
        assert not kernel_info(x, b).startswith("skinny"), kernel_info(x, b)
        out = poisoned_matmul(x, b)
    assert_matmul_close(out, x, b)


@pytest.mark.parametrize("precision", ["tf32", "ieee"])
@pytest.mark.parametrize("m,n,k", [(16, 4096, 4096), (1, 4097, 4099), (16, 14336, 1024)])
def test_deterministic_over_500_calls(m, n, k, precision):
    if precision == "ieee" and m > 1:
        pytest.skip("the FP32 skinny variant serves one row")
    x, w, b = rows(m, k), rows(n, k), torch.randn(n, device="cuda")
    assert kernel_info(x, w.mT, precision=precision).startswith("skinny"), kernel_info(x, w.mT, precision=precision)
    first = linear_tf32(x, w, b, "gelu", precision=precision)
    for _ in range(500):
        assert torch.equal(linear_tf32(x, w, b, "gelu", precision=precision), first)
