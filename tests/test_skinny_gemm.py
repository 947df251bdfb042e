"""The decode-sized-M kernel (csrc/cuda/decode/skinny_gemm.cu): x[M, K] @ w[N, K].T
for M <= 16 (up to 64 in blocks of 16 rows) with both operands K-major and 16-byte aligned (M = 1 runs it
when forced; the automatic choice there is the GEMV, test_gemv.py, as it
is for up to 4 rows in TF32 and 8 in 3xTF32). Values against
float64 with NaN-poisoned outputs over the edges of M, N and K, the fused
epilogue of linear_tf32, its rounding, the automatic choice, 3xTF32 and
bitwise determinism."""

import pytest
import torch

import pygpukit_torch
from pygpukit_torch import kernel_info, linear_tf32, matmul_tf32
from conftest import (ACTIVATIONS, HAS_CUDA, aligned_rows as rows, assert_linear_close, assert_matmul_close,
                      kernel_runs_here, matmul_reference, poison_next_output, poisoned_matmul, rel_error,
                      round_tf32)

pytestmark = pytest.mark.skipif(not HAS_CUDA or torch.cuda.get_device_capability() < (8, 0),
                                reason="needs a CUDA GPU of compute capability 8.0 or newer")

DECODE_SHAPES = [(m, n, k) for m in (2, 8, 16) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))]


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
    for kernel in ("auto", "skinny") if m > 1 else ("skinny",):
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
    # Up to M = 4 (TF32) and 8 (3xTF32) the few-rows GEMV serves; above M =
    # 8 on Hopper, TF32 with weights larger than 4096 x 4096 takes the wgmma
    # path (dispatch.cu, few_rows_gemv_max_m and kSkinnyOverWgmmaMaxM).
    x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
    expected = ("gemv" if m <= 4 else
                "wgmma" if m > 8 and n * k > 4096 * 4096 and kernel_runs_here("wgmma") else "skinny")
    assert kernel_info(x, w.mT).startswith(expected), kernel_info(x, w.mT)
    assert_matmul_close(poisoned_matmul(x, w.mT), x, w.mT)
    expected_tf32x3 = "on gemv" if m <= 8 else "on skinny"
    assert expected_tf32x3 in kernel_info(x, w.mT, precision="tf32x3"), kernel_info(x, w.mT, precision="tf32x3")


@pytest.mark.parametrize("m,n,k", DECODE_SHAPES)
def test_error_is_tf32_rounding(m, n, k):
    """The error is that of rounding the inputs to nearest (~3e-4 on randn,
    as cuBLAS TF32), not more: truncation would be ~2.6x larger. On Hopper
    the M = 16 cases with the larger weights run the wgmma path (split-K),
    whose margin then also covers the tensor cores' accumulation."""
    x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
    ref = matmul_reference(x, w.mT)
    rounded = rel_error(matmul_reference(round_tf32(x), round_tf32(w).mT), ref)
    # At M <= 4 the automatic choice is the FP32 GEMV (no TF32 rounding at
    # all): the skinny kernel is forced there, so that this tests its rounding.
    with pygpukit_torch.force_kernel("skinny" if m <= 4 else "auto"):
        ours = rel_error(matmul_tf32(x, w.mT), ref)
    assert ours <= 1.05 * rounded, (ours, rounded)


# (m, n, k, precision, the automatic choice on Hopper). 3xTF32 from 9 rows:
# up to 8 the automatic choice is the FP32 GEMV.
UNDERFILLED = [(16, 1024, 8192, "tf32", "wgmma"), (8, 1024, 4096, "tf32", "wgmma"),
               (16, 1024, 2048, "tf32", "skinny"), (16, 2048, 2048, "tf32", "skinny"),
               (5, 256, 8192, "tf32", "skinny"),  # below 2^24 multiply-adds
               (16, 256, 16384, "tf32", "wgmma"),  # above K = 8192
               (16, 1024, 8192, "tf32x3", "wgmma"), (16, 1024, 4096, "tf32x3", "skinny"),
               (16, 2048, 6144, "tf32x3", "skinny")]


@pytest.mark.parametrize("m,n,k,precision,on_hopper", UNDERFILLED)
def test_automatic_choice_when_skinny_leaves_sms_idle(m, n, k, precision, on_hopper):
    """Fewer skinny CTAs (16 columns each) than SMs: on Hopper the kernel
    that dispatch.cu's cost model (skinny_underfilled_faster) expects to end
    sooner, the wgmma path splitting K over every SM or the skinny kernel;
    elsewhere the skinny kernel. Values checked on the kernel taken."""
    if n // 16 >= torch.cuda.get_device_properties(0).multi_processor_count:
        pytest.skip("the skinny grid fills this GPU's SMs")
    x, w = rows(m, k), rows(n, k)
    expected = on_hopper if kernel_runs_here("wgmma") else "skinny"
    info = kernel_info(x, w.mT, precision=precision)
    if precision == "tf32":
        assert info.startswith(expected), info
    else:
        split = "3xTF32 (B split" if expected == "wgmma" else "3xTF32 (A, B split"
        assert info.startswith(split) and f"on {expected}" in info, info
    assert_matmul_close(poisoned_matmul(x, w.mT, precision), x, w.mT, precision=precision)


def test_tf32x3_staged_small_problem_runs_skinny():
    """x @ W with N not a multiple of 4 (not TMA-addressable): 3xTF32 packs
    both operands' parts K-major (3K columns) and the skinny kernel runs
    them. Below 2^24 multiply-adds its alternative is the mma.sync tiles (2
    CTAs here), 10x slower on the H200 (275.7 vs 27.3 us), which a first
    form of the underfilled rule chose."""
    x, w = torch.randn(5, 2048, device="cuda"), torch.randn(2048, 255, device="cuda")
    info = kernel_info(x, w, precision="tf32x3")
    assert "3K columns) on skinny" in info, info
    assert_matmul_close(poisoned_matmul(x, w, "tf32x3"), x, w, precision="tf32x3")


def test_folded_batch_and_vector_x():
    # x[2, 4, K] over one weight folds into M = 8; a 1-D x is M = 1 (leading
    # dimension 0), which serves any K, here odd, without padding.
    w = rows(300, 4099)
    x3 = torch.randn(2, 4, 4100, device="cuda")[..., :4099]
    x1 = torch.randn(4099, device="cuda")
    for x in (x3, x1):
        with pygpukit_torch.force_kernel("skinny"):
            assert kernel_info(x, w.mT).startswith("skinny"), kernel_info(x, w.mT)
            assert_matmul_close(poisoned_matmul(x, w.mT), x, w.mT)


@pytest.mark.parametrize("m,n,k", [(16, 4096, 4096), (2, 4097, 4099), (5, 300, 33)])
def test_tf32x3_splits_in_registers(m, n, k):
    """3xTF32 on the skinny kernel: the operands are split in registers (no
    pack), and the error is 3xTF32's, not TF32's."""
    x, w = rows(m, k), rows(n, k)
    with pygpukit_torch.force_kernel("skinny"):  # the automatic choice at M <= 8 is the GEMV
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
    with pygpukit_torch.force_kernel("skinny"):  # the automatic choice at M <= 8 is the GEMV
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
        c = torch.tensor([[fmax, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], device="cuda")
        d = torch.tensor([[0.0, 1.0, 0.0, 0.0]], device="cuda")
        assert "in registers" in kernel_info(c, d.mT, precision="tf32x3")
        assert float(matmul_tf32(c, d.mT, precision="tf32x3")[0, 0]) == 1.0
        # FLT_MAX * 1 stays finite: big + small must not round up to 2^128.
        e = torch.tensor([[fmax, 0.0, 0.0, 0.0]], device="cuda")
        one = torch.tensor([[1.0, 0.0, 0.0, 0.0]], device="cuda")
        for x, y in ((e, one), (one, e)):
            assert "in registers" in kernel_info(x, y.mT, precision="tf32x3")
            got = float(matmul_tf32(x, y.mT, precision="tf32x3")[0, 0])
            assert got == pytest.approx(fmax, rel=1e-6), got


def test_tf32x3_in_registers_special_value_blocks_match_plain_ones():
    """A block of K holding an Inf, a NaN or a value near FLT_MAX takes the
    full split for its warp (a lane's special value sends the whole warp),
    the other blocks the short one. Both give the same parts for ordinary
    values: every output the special values do not reach is bitwise what
    it is without them."""
    x, w = rows(16, 4096), rows(64, 4096)
    with pygpukit_torch.force_kernel("skinny"):
        assert "in registers" in kernel_info(x, w.mT, precision="tf32x3")
        plain = matmul_tf32(x, w.mT, precision="tf32x3")
        x2, w2 = x.clone(), w.clone()
        x2[3, 2000], w2[5, 1000], w2[40, 77] = float("nan"), float("inf"), torch.finfo(torch.float32).max
        special = matmul_tf32(x2, w2.mT, precision="tf32x3")
    reached = torch.zeros_like(plain, dtype=torch.bool)
    reached[3, :], reached[:, 5], reached[:, 40] = True, True, True
    assert torch.equal(special[~reached], plain[~reached])
    assert special[3].isnan().all() and special[:, 5].isinf().logical_or(special[:, 5].isnan()).all()
    assert torch.isfinite(special[~reached]).all()


@pytest.mark.parametrize("precision", ["tf32", "tf32x3"])
@pytest.mark.parametrize("m", [17, 31, 48, 64])
@pytest.mark.parametrize("n,k", [(40, 64), (1000, 4099)])
def test_row_blocks_forced(m, n, k, precision):
    """17 to 64 rows: blocks of 16, one launch each. A whole block of 16
    comes out bitwise as those rows computed alone (same kernel, same
    K-slices); the epilogue runs in every block."""
    x, w, b = rows(m, k), rows(n, k), torch.randn(n, device="cuda")
    with pygpukit_torch.force_kernel("skinny"):
        info = kernel_info(x, w.mT, precision=precision)
        assert "on skinny" in f"on {info}" and "in blocks of 16 rows" in info, info
        assert ("in registers) on skinny" in info) == (precision == "tf32x3"), info
        out = poisoned_matmul(x, w.mT, precision)
        assert_matmul_close(out, x, w.mT, precision=precision)
        for m0 in range(0, m - 15, 16):
            assert torch.equal(poisoned_matmul(x[m0:m0 + 16], w.mT, precision), out[m0:m0 + 16]), m0
        poison_next_output((m, n), "cuda")
        fused = linear_tf32(x, w, b, "silu", precision=precision)
    assert_linear_close(fused, x, w, b, "silu", precision=precision)


def test_tf32x3_automatic_rows():
    """Unforced, 3xTF32 on F.linear's layout takes the skinny kernel from 9
    rows (above the GEMV's 8) up to 16, in one block; above that on Hopper
    the wgmma kernel that splits W in registers, up to 128 rows (it reads W
    once for all rows, the skinny kernel's blocks once per 16); elsewhere
    neither. TF32 keeps the skinny kernel to 16 rows as well."""
    w = rows(1000, 300)
    hopper = kernel_runs_here("wgmma")
    for m in (9, 16, 17, 64, 128, 129):
        x = rows(m, 300)
        info = kernel_info(x, w.mT, precision="tf32x3")
        if m <= 16:
            assert "in registers) on skinny" in info and "blocks" not in info, (m, info)
        else:
            assert "skinny" not in info, (m, info)
            assert ("B split into big and small TF32 parts in registers" in info) == (hopper and m <= 128), (m, info)
        out = poisoned_matmul(x, w.mT, "tf32x3")
        assert_matmul_close(out, x, w.mT, precision="tf32x3")
        assert rel_error(out, matmul_reference(x, w.mT)) < 1e-6
    assert "skinny" not in kernel_info(rows(17, 300), w.mT, precision="tf32")


@pytest.mark.parametrize("case", ["m65", "x_offset", "w_row_major"])
def test_forced_skinny_falls_back(case):
    x, w = rows(16, 64), rows(40, 64)
    b = w.mT
    if case == "m65":
        x = rows(65, 64)
    elif case == "x_offset":  # base pointer 4 bytes past a 16-byte boundary
        x = torch.randn(16 * 64 + 1, device="cuda")[1:].view(16, 64)
    else:
        b = w.mT.contiguous()
    with pygpukit_torch.force_kernel("skinny"):
        assert not kernel_info(x, b).startswith("skinny"), kernel_info(x, b)
        out = poisoned_matmul(x, b)
    assert_matmul_close(out, x, b)


@pytest.mark.parametrize("precision", ["tf32", "tf32x3"])
@pytest.mark.parametrize("m,n,k", [(16, 4096, 4096), (2, 4097, 4099), (16, 14336, 1024)])
def test_deterministic_over_500_calls(m, n, k, precision):
    x, w, b = rows(m, k), rows(n, k), torch.randn(n, device="cuda")
    with pygpukit_torch.force_kernel("skinny"):  # the automatic choice at M = 2 is the GEMV
        info = kernel_info(x, w.mT, precision=precision)
        assert "skinny" in info, info
        first = linear_tf32(x, w, b, "gelu", precision=precision)
        for _ in range(500):
            assert torch.equal(linear_tf32(x, w, b, "gelu", precision=precision), first)
