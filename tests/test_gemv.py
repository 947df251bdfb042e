"""The GEMV kernels: x[1, K] @ w[N, K].T (csrc/cuda/decode/gemv_kmajor.cu, x and w
K-major) and x[1, K] @ W[K, N] (csrc/cuda/decode/gemv_rowmajor.cu, W row-major), in
FP32 FMAs for every precision, with the weight 16-byte aligned; and 2 to
16 rows of x on either layout (gemv_kmajor_rows.cu, gemv_rowmajor.cu), forced and
where the automatic choice takes them. Values
against float64 with NaN-poisoned outputs over the edges of N and K and of
every K-slice count, the fused epilogue of linear_tf32, special values, the
automatic choice and its fallbacks, and bitwise determinism."""

import re

import pytest
import torch

import pygpukit_torch
from pygpukit_torch import kernel_info, linear_tf32, matmul_tf32
from pygpukit_torch.testing import cublas_tf32
from conftest import (ACTIVATIONS, HAS_CUDA, aligned_rows as rows, assert_linear_close, assert_matmul_close,
                      kernel_runs_here, matmul_reference, poison_next_output, poisoned_matmul, rel_error)

pytestmark = pytest.mark.skipif(not HAS_CUDA or torch.cuda.get_device_capability() < (8, 0),
                                reason="needs a CUDA GPU of compute capability 8.0 or newer")

PRECISIONS = ("tf32", "tf32x3", "ieee")


def slices_of(info):
    """The K-slice count that kernel_info reports for a gemv call."""
    match = re.search(r"gemv, FP32 FMAs, (\d+) K-slices? per output", info)
    assert match, info
    return int(match.group(1))


def sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("n,k", [(4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096), (512, 4096)])
def test_chosen_for_one_row_at_fp32_accuracy(n, k, precision):
    """Every precision runs the same FP32 kernel at one row: bitwise the same
    result, with FP32's error (TF32 rounding would give ~3e-4)."""
    x, w = torch.randn(1, k, device="cuda"), torch.randn(n, k, device="cuda")
    info = kernel_info(x, w.mT, precision=precision)
    assert info.startswith("gemv") or info.startswith("FP32 (at least as accurate"), info
    out = poisoned_matmul(x, w.mT, precision)
    assert_matmul_close(out, x, w.mT, precision="ieee")
    assert rel_error(out, matmul_reference(x, w.mT)) < 1e-6
    torch.testing.assert_close(out, matmul_tf32(x, w.mT, precision="ieee"), rtol=0, atol=0)


@pytest.mark.parametrize("n,k", [(4096, 4096), (4096, 14336), (300, 65536)])
def test_error_at_most_cublas_fp32(n, k):
    """The mission's bar for a decode step: no less accurate than torch's
    FP32 GEMV (cuBLAS) on the same inputs. Measured on the H200: 0.34-0.71x
    its error, from 16 short running sums per lane."""
    torch.manual_seed(0)
    x, w = torch.randn(1, k, device="cuda"), torch.randn(n, k, device="cuda")
    ref = matmul_reference(x, w.mT)
    with cublas_tf32(False):
        cublas = rel_error(torch.matmul(x, w.mT), ref)
    assert rel_error(matmul_tf32(x, w.mT), ref) <= cublas


@pytest.mark.parametrize("k", [1, 3, 4, 5, 127, 128, 129, 511, 512, 513, 1000, 4099])
@pytest.mark.parametrize("per_sm,slices", [(5, 8), (10, 4), (20, 2), (40, 1)])
def test_edges_of_k_for_every_slice_count(per_sm, slices, k):
    """N = per_sm x SMs outputs take `slices` K-slices each (dispatch.cu,
    gemv_kmajor_choice: ~30 warps per SM); K tails inside the last slice, slices
    that are empty at small K, and a partial last CTA (N odd)."""
    n = per_sm * sms() + 1
    x, w = rows(1, k), rows(n, k)
    info = kernel_info(x, w.mT)
    assert slices_of(info) == slices, info
    out = poisoned_matmul(x, w.mT)
    assert_matmul_close(out, x, w.mT, precision="ieee")


@pytest.mark.parametrize("k", [1, 5, 1000, 4099])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 100, 4097])
def test_edges_of_n_and_vector_x(n, k):
    """A 1-D x is one row too (its leading dimension does not matter, so any K)."""
    x, w = torch.randn(k, device="cuda"), rows(n, k)
    assert kernel_info(x, w.mT).startswith("gemv"), kernel_info(x, w.mT)
    out = poisoned_matmul(x, w.mT)
    assert out.shape == (n,)
    assert_matmul_close(out, x, w.mT, precision="ieee")
    torch.testing.assert_close(matmul_tf32(x[None], w.mT)[0], out, rtol=0, atol=0)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n,k", [(70, 300), (5000, 33), (4097, 4099)])
def test_linear_epilogue(n, k, bias, activation):
    x, w = rows(1, k), rows(n, k).div_(k ** 0.5)  # in place: keeps the 16-byte-aligned rows
    b = torch.randn(n, device="cuda") if bias else None
    assert kernel_info(x, w.mT).startswith("gemv")
    poison_next_output((1, n), "cuda")
    out = linear_tf32(x, w, b, activation)
    assert_linear_close(out, x, w, b, activation, precision="ieee")


@pytest.mark.parametrize("n", [70, 5000])  # 8 and 1 K-slices on the H200
def test_special_values_like_torch(n):
    x, w = rows(1, 300), rows(n, 300)
    w[2, 5], w[3, 7], w[9, 299] = float("nan"), float("inf"), float("-inf")
    got, ref = matmul_tf32(x, w.mT), torch.matmul(x.double(), w.mT.double())
    assert torch.equal(got.isnan(), ref.isnan())
    assert torch.equal(got.isinf() & (got > 0), ref.isinf() & (ref > 0))
    assert torch.equal(got.isinf() & (got < 0), ref.isinf() & (ref < 0))
    assert int(got.isnan().sum()) == 1 and int(got.isinf().sum()) == 2
    torch.testing.assert_close(got[got.isfinite()].double(), ref[ref.isfinite()], rtol=1e-5, atol=1e-5)
    # Inf in x (the operand every warp shares): columns whose weight there is
    # 0 become NaN (inf * 0), the others inf, as in torch; the repeated last
    # row that pads the last CTA is never stored.
    x2, w2 = rows(1, 40), rows(n, 40)
    x2[0, 33], w2[:, 33] = float("inf"), 0.0
    w2[:35, 33] = 1.0
    got, ref = matmul_tf32(x2, w2.mT), torch.matmul(x2.double(), w2.mT.double())
    assert torch.equal(got.isnan(), ref.isnan()) and torch.equal(got.isinf(), ref.isinf())
    assert int(got.isinf().sum()) == 35 and int(got.isnan().sum()) == n - 35


def test_forcing_and_fallbacks():
    x, w = rows(1, 1000), rows(300, 1000)
    # Another forced kernel runs instead: skinny keeps TF32, fma is FP32 with
    # another summation order (so not bitwise equal: the call changed kernels).
    gemv = matmul_tf32(x, w.mT)
    with pygpukit_torch.force_kernel("skinny"):
        assert kernel_info(x, w.mT).startswith("skinny"), kernel_info(x, w.mT)
        skinny = matmul_tf32(x, w.mT)
    assert rel_error(skinny, matmul_reference(x, w.mT)) > 10 * rel_error(gemv, matmul_reference(x, w.mT))
    with pygpukit_torch.force_kernel("fma"):
        assert kernel_info(x, w.mT, precision="ieee").startswith("fma")
        fma = matmul_tf32(x, w.mT, precision="ieee")
    torch.testing.assert_close(gemv, fma, rtol=1e-5, atol=1e-5 * float(fma.abs().max()))
    assert not torch.equal(gemv, fma)
    # What gemv cannot run falls back (forced or not), with correct values:
    # 17 rows, a weight row that is not 16-byte aligned, a row-major B.
    cases = {"17 rows": (rows(17, 1000), w.mT),
             "unaligned weight": (x, torch.randn(300 * 1000 + 1, device="cuda")[1:].view(300, 1000).mT),
             "unaligned row-major B": (x, torch.randn(1000, 301, device="cuda")[:, 1:])}
    for kernel in ("auto", "gemv"):
        with pygpukit_torch.force_kernel(kernel):
            for name, (a, b) in cases.items():
                assert not kernel_info(a, b).startswith("gemv"), (name, kernel_info(a, b))
                assert_matmul_close(poisoned_matmul(a, b), a, b)


@pytest.mark.parametrize("n,k", [(4097, 4099), (300, 1000), (14336, 4096)])
def test_deterministic_over_500_calls(n, k):
    x, w, b = rows(1, k), rows(n, k), torch.randn(n, device="cuda")
    assert kernel_info(x, w.mT).startswith("gemv")
    first = linear_tf32(x, w, b, "gelu")
    for _ in range(500):
        assert torch.equal(linear_tf32(x, w, b, "gelu"), first)


@pytest.mark.skipif(HAS_CUDA and torch.cuda.get_device_properties(0).total_memory < 12 * 2 ** 30,
                    reason="needs 8.6 GB for the weight")
def test_weight_of_more_than_2_31_elements():
    # w has 2^31 + 4096 * 8 elements: row offsets past 2^31 must not wrap.
    n, k = 2 ** 31 // 4096 + 8, 4096
    w = torch.empty(n, k, device="cuda")
    w.normal_()
    x = torch.randn(1, k, device="cuda")
    assert kernel_info(x, w.mT).startswith("gemv")
    out = poisoned_matmul(x, w.mT)
    last = slice(n - 64, n)  # the last 8 of these rows start past element 2^31
    assert_matmul_close(out[:, last].contiguous(), x, w[last].mT)
    del w


# The row-major weight: x @ W with W[K, N] (gemv_rowmajor.cu).

def splits_of_rowmajor(info):
    """The split-K count that kernel_info reports for a row-major gemv call."""
    assert "B read row by row" in info, info
    match = re.search(r"split-K (\d+)", info)
    return int(match.group(1)) if match else 1


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("n,k", [(4096, 4096), (14336, 4096), (4096, 14336), (768, 3072)])
def test_rowmajor_b_at_fp32_accuracy(n, k, precision):
    """x @ W for a weight stored [in, out]: read in place by the row-major
    GEMV (no K-major copy of W), FP32 for every precision, bitwise the same."""
    x, w = torch.randn(1, k, device="cuda"), torch.randn(k, n, device="cuda")
    info = kernel_info(x, w, precision=precision)
    assert "B read row by row" in info and "pack" not in info, info
    out = poisoned_matmul(x, w, precision)
    assert_matmul_close(out, x, w, precision="ieee")
    assert rel_error(out, matmul_reference(x, w)) < 1e-6
    torch.testing.assert_close(out, matmul_tf32(x, w, precision="ieee"), rtol=0, atol=0)


@pytest.mark.parametrize("k", [1, 7, 8, 63, 64, 65, 511, 4099])
@pytest.mark.parametrize("n", [2, 3, 5, 127, 128, 129, 1000, 4097])
def test_rowmajor_b_edges_of_n_and_k(n, k):
    """Column blocks cut by N's end (a lane with 1-3 columns, lanes with
    none), K groups cut by K's end, and the split counts these give (1 for
    small K, up to 32)."""
    x, w = rows(1, k), rows(k, n)
    splits = splits_of_rowmajor(kernel_info(x, w))
    assert 1 <= splits <= 32
    if k < 128:  # under two CTA steps of 64 rows of B: nothing to split
        assert splits == 1
    if k == 4099 and n <= 1000:  # at most 8 column blocks: K split to give every SM work
        assert splits > 1
    out = poisoned_matmul(x, w)
    assert_matmul_close(out, x, w, precision="ieee")
    # A 1-D x is the same row.
    torch.testing.assert_close(matmul_tf32(x[0], w), out[0], rtol=0, atol=0)


def test_rowmajor_b_split_counts():
    """The choice fills the SMs once: 1 split when the column blocks alone
    do, more for fewer columns, at most 32, each split at least 64 rows."""
    assert splits_of_rowmajor(kernel_info(rows(1, 64), rows(64, 4 * 128 * sms()))) == 1
    assert splits_of_rowmajor(kernel_info(rows(1, 4096), rows(4096, 128))) == 32
    assert splits_of_rowmajor(kernel_info(rows(1, 192), rows(192, 128))) == 3
    # 4 splits of 65 rows become 3 of 128 (two whole 64-row steps each).
    assert splits_of_rowmajor(kernel_info(rows(1, 260), rows(260, 128))) == 3
    info = kernel_info(rows(1, 4096), rows(4096, 4096))
    assert 1 < splits_of_rowmajor(info) <= 32, info


@pytest.mark.parametrize("splits", [2, 8, 9, 11, 17])
def test_rowmajor_b_split_counts_off_the_reduction_batch(splits):
    """Split counts on both sides of splitk_reduce's batches of 8 loads
    (a last batch of 1 and 3 splits among them): 129 columns give 2 column
    blocks, so K = 64 x splits gets exactly that many 64-row splits where
    the two blocks' 4 CTAs per SM leave room for them (2 x SMs >= splits)."""
    if 2 * sms() < splits:
        pytest.skip(f"{sms()} SMs take fewer than {splits} splits of 2 column blocks")
    x, w = rows(1, 64 * splits), rows(64 * splits, 129)
    assert splits_of_rowmajor(kernel_info(x, w)) == splits
    out = poisoned_matmul(x, w)
    assert_matmul_close(out, x, w, precision="ieee")
    torch.testing.assert_close(matmul_tf32(x, w), out, rtol=0, atol=0)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n,k", [(70, 300), (4097, 4099), (5000, 33)])
def test_rowmajor_b_linear_epilogue(n, k, bias, activation):
    """linear_tf32 with a weight that is the transpose of a row-major [K, N]
    matrix (Conv1D's layout), with and without K-splits."""
    x, w_kn = rows(1, k), rows(k, n).div_(k ** 0.5)
    weight = w_kn.mT  # [N, K], N-major
    b = torch.randn(n, device="cuda") if bias else None
    assert "B read row by row" in kernel_info(x, w_kn)
    poison_next_output((1, n), "cuda")
    out = linear_tf32(x, weight, b, activation)
    assert_linear_close(out, x, weight, b, activation, precision="ieee")


@pytest.mark.parametrize("n,k", [(4096, 4096), (4096, 14336)])
def test_rowmajor_b_error_at_most_cublas_fp32(n, k):
    torch.manual_seed(1)
    x, w = torch.randn(1, k, device="cuda"), torch.randn(k, n, device="cuda")
    ref = matmul_reference(x, w)
    with cublas_tf32(False):
        cublas = rel_error(torch.matmul(x, w), ref)
    assert rel_error(matmul_tf32(x, w), ref) <= cublas


def test_rowmajor_b_special_values_like_torch():
    k, n = 300, 1000
    x, w = rows(1, k), rows(k, n)
    w[5, 2], w[7, 3], w[299, 999] = float("nan"), float("inf"), float("-inf")
    got, ref = matmul_tf32(x, w), torch.matmul(x.double(), w.double())
    assert torch.equal(got.isnan(), ref.isnan())
    assert torch.equal(got.isinf() & (got > 0), ref.isinf() & (ref > 0))
    assert torch.equal(got.isinf() & (got < 0), ref.isinf() & (ref < 0))
    assert int(got.isnan().sum()) == 1 and int(got.isinf().sum()) == 2
    torch.testing.assert_close(got[got.isfinite()].double(), ref[ref.isfinite()], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n,k", [(4097, 4099), (14336, 4096)])
def test_rowmajor_b_deterministic_over_500_calls(n, k):
    x, w, b = rows(1, k), rows(k, n), torch.randn(n, device="cuda")
    assert "B read row by row" in kernel_info(x, w)
    first = linear_tf32(x, w.mT, b, "gelu")
    for _ in range(500):
        assert torch.equal(linear_tf32(x, w.mT, b, "gelu"), first)


# A few rows of A on the row-major weight: the same kernel built for 2, 4, 8
# and 16 rows per CTA (gemv_rowmajor.cu), forced here (the automatic choice
# takes it up to 8 rows in TF32 and 16 in 3xTF32 and FP32).

FEW_ROWS = (2, 3, 4, 5, 8, 9, 15, 16)


@pytest.mark.parametrize("m", FEW_ROWS)
@pytest.mark.parametrize("n,k", [(4096, 4096), (1000, 63), (129, 4099), (130, 1), (131, 9), (5, 7), (4097, 520)])
def test_rowmajor_b_few_rows_forced(m, n, k):
    """Each load of W feeds all rows of x; rows past M in a CTA's 4, 8 or 16
    repeat row M - 1 and must not be stored (NaN-poisoned output); N's and
    K's edges as for one row. FP32 for every precision, bitwise the same."""
    x, w = rows(m, k), rows(k, n)
    with pygpukit_torch.force_kernel("gemv"):
        info = kernel_info(x, w)
        assert "B read row by row" in info and f"{m} rows of A" in info, info
        out = poisoned_matmul(x, w)
        assert_matmul_close(out, x, w, precision="ieee")
        assert rel_error(out, matmul_reference(x, w)) < 1e-6
        for precision in PRECISIONS:
            torch.testing.assert_close(poisoned_matmul(x, w, precision), out, rtol=0, atol=0)
        assert kernel_info(x, w, precision="tf32x3").startswith("FP32 (at least as accurate")


def test_rowmajor_b_few_rows_fallbacks():
    """What the forced kernel cannot run goes to the automatic choice, with
    correct values: 65 rows, rows of x not 16-byte aligned, a batch of W."""
    k, n = 300, 1000
    w = rows(k, n)
    cases = {"65 rows": (rows(65, k), w),
             "unaligned rows of x": (torch.randn(4, k + 1, device="cuda")[:, 1:], w),
             "x's row stride not a multiple of 4": (torch.randn(4, k + 1, device="cuda")[:, :k], w),
             "a batch of W": (rows(4, k), torch.randn(2, k, n, device="cuda"))}
    with pygpukit_torch.force_kernel("gemv"):
        for name, (a, b) in cases.items():
            assert "B read row by row" not in kernel_info(a, b), (name, kernel_info(a, b))
            assert_matmul_close(poisoned_matmul(a, b), a, b)
        # One unaligned row needs no alignment of x.
        x1 = torch.randn(1, k + 1, device="cuda")[:, 1:]
        assert "B read row by row" in kernel_info(x1, w)
        assert_matmul_close(poisoned_matmul(x1, w), x1, w, precision="ieee")


@pytest.mark.parametrize("m", [17, 31, 33, 64])
@pytest.mark.parametrize("n,k", [(1000, 63), (129, 4099), (4097, 520)])
def test_rowmajor_b_row_blocks_forced(m, n, k):
    """17 to 64 rows: blocks of 16, one launch each, for every precision.
    A whole block of 16 comes out as the same rows computed alone (bitwise:
    same kernel, same K-splits); a last, shorter block runs the kernel for
    its rows at the whole call's K-splits, so it is only compared by value."""
    x, w = rows(m, k), rows(k, n)
    with pygpukit_torch.force_kernel("gemv"):
        info = kernel_info(x, w, precision="tf32x3")
        assert "B read row by row" in info and f"{m} rows of A" in info and "in blocks of 16" in info, info
        out = poisoned_matmul(x, w)
        assert_matmul_close(out, x, w, precision="ieee")
        for precision in PRECISIONS:
            torch.testing.assert_close(poisoned_matmul(x, w, precision), out, rtol=0, atol=0)
        for m0 in range(0, m - 15, 16):
            assert torch.equal(poisoned_matmul(x[m0:m0 + 16], w), out[m0:m0 + 16]), m0
    # Unforced, these rows take another kernel.
    assert "B read row by row" not in kernel_info(x, w)


def test_rowmajor_b_row_blocks_linear_and_deterministic():
    """The fused epilogue in every block; 100 calls bitwise the same."""
    x, w, b = rows(33, 4099), rows(4099, 300), torch.randn(300, device="cuda")
    with pygpukit_torch.force_kernel("gemv"):
        assert "in blocks of 16" in kernel_info(x, w)
        poison_next_output((33, 300), "cuda")
        first = linear_tf32(x, w.mT, b, "gelu")
        assert_linear_close(first, x, w.mT, b, "gelu", precision="ieee")
        for _ in range(100):
            assert torch.equal(linear_tf32(x, w.mT, b, "gelu"), first)


def test_rowmajor_b_few_rows_batched_x():
    """x[2, 3, K] @ W folds into 6 rows of one GEMM."""
    x, w = torch.randn(2, 3, 512, device="cuda"), torch.randn(512, 768, device="cuda")
    with pygpukit_torch.force_kernel("gemv"):
        assert "6 rows of A" in kernel_info(x, w)
        out = poisoned_matmul(x, w)
    assert out.shape == (2, 3, 768)
    assert_matmul_close(out, x, w, precision="ieee")


@pytest.mark.parametrize("layout", ["x @ W", "x @ w.mT"])
def test_single_row_batches_fold_into_rows(layout):
    """x[B, 1, K] @ W (a decode step's B tokens) is one product of B rows,
    not B one-row products each reading the weight; also with the rows
    further apart than K (a slice of a wider x, every other batch)."""
    k, n = 512, 768
    w = torch.randn(k, n, device="cuda") if layout == "x @ W" else torch.randn(n, k, device="cuda").mT
    for x in (torch.randn(5, 1, k, device="cuda"), torch.randn(10, 1, k + 4, device="cuda")[::2, :, :k]):
        with pygpukit_torch.force_kernel("gemv"):
            assert "5 rows of A" in kernel_info(x, w), kernel_info(x, w)
            out = poisoned_matmul(x, w)
        assert out.shape == (5, 1, n)
        assert_matmul_close(out, x, w, precision="ieee")
        assert_matmul_close(poisoned_matmul(x, w), x, w)  # the automatic choice


def test_rowmajor_b_few_rows_repeated_row_and_special_values():
    """One row of x expanded to 4 (row stride 0) gives 4 equal rows; NaN and
    infinities in W reach the same outputs as in torch, in every row."""
    k, n = 300, 1000
    x, w = torch.randn(1, k, device="cuda").expand(4, k), rows(k, n)
    w[5, 2], w[7, 3], w[299, 999] = float("nan"), float("inf"), float("-inf")
    with pygpukit_torch.force_kernel("gemv"):
        assert "4 rows of A" in kernel_info(x, w)
        got = poisoned_matmul(x, w)
    ref = torch.matmul(x.double(), w.double())
    assert torch.equal(got.isnan(), ref.isnan())
    assert torch.equal(got.isinf() & (got > 0), ref.isinf() & (ref > 0))
    assert torch.equal(got.isinf() & (got < 0), ref.isinf() & (ref < 0))
    assert int(got.isnan().sum()) == 4 and int(got.isinf().sum()) == 8
    torch.testing.assert_close(got[got.isfinite()].double(), ref[ref.isfinite()], rtol=1e-5, atol=1e-5)
    # NaN != NaN: compare with the NaNs (checked equal above) zeroed.
    assert all(torch.equal(got[i].nan_to_num(0.0), got[0].nan_to_num(0.0)) for i in range(1, 4))


# A few rows of x on a K-major weight (F.linear's layout): gemv_kmajor_rows.cu,
# forced here (the automatic choice takes it up to 4 rows in TF32, 8 in
# 3xTF32 and 16 in FP32; the skinny kernel serves the other rows).

def slices_of_rows(info):
    """The K-slice count that kernel_info reports for a few-rows gemv call."""
    match = re.search(r"rows of A, \d+ weight rows per warp, (\d+) K-slices? per output", info)
    assert match, info
    return int(match.group(1))


@pytest.mark.parametrize("m", FEW_ROWS)
@pytest.mark.parametrize("n,k", [(4096, 4096), (1000, 63), (129, 4099), (3, 1), (131, 9), (8449, 260),
                                 (300, 65536)])
def test_kmajor_few_rows_forced(m, n, k):
    """x @ w.T with 2-16 rows: each chunk of x feeds 4 weight rows, each
    chunk of w all rows of x; rows of x past M in a CTA's 4, 8 or 16 and
    weight rows past N are read, never stored (NaN-poisoned output); K
    tails, 1 to 8 K-slices. FP32 for every precision, bitwise the same."""
    x, w = rows(m, k), rows(n, k)
    with pygpukit_torch.force_kernel("gemv"):
        info = kernel_info(x, w.mT)
        assert info.startswith(f"gemv, FP32 FMAs, {m} rows of A"), info
        out = poisoned_matmul(x, w.mT)
        assert_matmul_close(out, x, w.mT, precision="ieee")
        assert rel_error(out, matmul_reference(x, w.mT)) < 1e-6
        for precision in PRECISIONS:
            torch.testing.assert_close(poisoned_matmul(x, w.mT, precision), out, rtol=0, atol=0)
        assert kernel_info(x, w.mT, precision="tf32x3").startswith("FP32 (at least as accurate")


def test_kmajor_few_rows_slice_counts():
    """The fewest K-slices (1, 2, 4, 8) that give every SM 16 warps at 4
    outputs per warp; values right for each (a K tail in the last slice)."""
    x = rows(5, 1030)
    with pygpukit_torch.force_kernel("gemv"):
        for n, slices in ((4 * 16 * sms(), 1), (2 * 16 * sms() + 1, 2), (129, 8)):
            w = rows(n, 1030)
            assert slices_of_rows(kernel_info(x, w.mT)) == slices, (n, kernel_info(x, w.mT))
            assert_matmul_close(poisoned_matmul(x, w.mT), x, w.mT, precision="ieee")


def test_kmajor_few_rows_repeated_row_one_output_batched_x_special_values():
    """x expanded from one row (row stride 0), one output (N = 1), a batch of
    x folded into rows, and NaN / infinities in the weight as in torch."""
    k = 300
    w = rows(7, k)
    w[1, 5], w[3, 7], w[6, 299] = float("nan"), float("inf"), float("-inf")
    cases = {"expanded x": (torch.randn(1, k, device="cuda").expand(4, k), w.mT),
             "one output": (rows(4, k), rows(1, k).mT),
             "batched x": (torch.randn(2, 3, k, device="cuda"), w.mT)}
    with pygpukit_torch.force_kernel("gemv"):
        for name, (a, b) in cases.items():
            assert "weight rows per warp" in kernel_info(a, b), (name, kernel_info(a, b))
            got, ref = poisoned_matmul(a, b), torch.matmul(a.double(), b.double())
            assert torch.equal(got.isnan(), ref.isnan()), name
            assert torch.equal(got.isinf() & (got > 0), ref.isinf() & (ref > 0)), name
            assert torch.equal(got.isinf() & (got < 0), ref.isinf() & (ref < 0)), name
            torch.testing.assert_close(got[got.isfinite()].double(), ref[ref.isfinite()], rtol=1e-5, atol=1e-5)


def test_kmajor_few_rows_fallbacks():
    """What the forced kernel cannot run goes to the automatic choice, with
    correct values: 17 rows, rows of x not 16-byte aligned, a weight whose
    rows are not."""
    k, n = 300, 1000
    w = rows(n, k)
    cases = {"17 rows": (rows(17, k), w.mT),
             "unaligned rows of x": (torch.randn(4, k + 1, device="cuda")[:, 1:], w.mT),
             "unaligned weight rows": (rows(4, k), torch.randn(n, k + 1, device="cuda")[:, 1:].mT)}
    with pygpukit_torch.force_kernel("gemv"):
        for name, (a, b) in cases.items():
            assert "rows of A" not in kernel_info(a, b), (name, kernel_info(a, b))
            assert_matmul_close(poisoned_matmul(a, b), a, b)


# Both few-rows kernels: the weight row-major (x @ W, gemv_rowmajor.cu) or
# K-major (x @ w.T, gemv_kmajor_rows.cu), forced or chosen.

def few_rows_weight(layout, n, k):
    """The B operand [k, n] of x @ B: W stored [k, n] (row-major) or the
    transpose of w stored [n, k] (K-major); 16-byte aligned rows."""
    return rows(k, n) if layout == "row-major" else rows(n, k).mT


def few_rows_kernel_named(info, m):
    return f"{m} rows of A" in info and ("B read row by row" in info or "weight rows per warp" in info)


@pytest.mark.parametrize("layout", ["row-major", "K-major"])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("m,n,k", [(3, 70, 300), (16, 4097, 4099), (8, 5000, 33), (4, 9000, 64)])
def test_few_rows_linear_epilogue(m, n, k, bias, activation, layout):
    """linear_tf32 with a few rows: the epilogue on each stored output, with
    one K-split or K-slice (N = 9000 on up to 140 SMs) and with several."""
    weight = few_rows_weight(layout, n, k).div_(k ** 0.5).mT  # [n, k]
    x = rows(m, k)
    b = torch.randn(n, device="cuda") if bias else None
    with pygpukit_torch.force_kernel("gemv"):
        assert few_rows_kernel_named(kernel_info(x, weight.mT), m), kernel_info(x, weight.mT)
        poison_next_output((m, n), "cuda")
        out = linear_tf32(x, weight, b, activation)
    assert_linear_close(out, x, weight, b, activation, precision="ieee")


# The largest M at which the automatic choice takes the few-rows GEMV
# (dispatch.cu, few_rows_gemv_max_m), by weight layout and precision.
# 3xTF32 on a row-major weight: up to 48 rows where nothing better runs, up
# to 16 on Hopper, where the wgmma kernel that splits W in registers does;
# FP32 up to 32, above which the FMA kernel is faster.
AUTO_MAX_M = {("row-major", "tf32"): 8, ("row-major", "tf32x3"): 48, ("row-major", "ieee"): 32,
              ("K-major", "tf32"): 4, ("K-major", "tf32x3"): 8, ("K-major", "ieee"): 16}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", ["row-major", "K-major"])
def test_few_rows_automatic_choice(layout, precision):
    """Unforced, the GEMVs serve 2 rows up to their limit, each rows-per-CTA
    tier in it, and not one row past it; the values are FP32's when they do
    and those of the precision when not."""
    limit = AUTO_MAX_M[layout, precision]
    if (layout, precision) == ("row-major", "tf32x3") and kernel_runs_here("wgmma"):
        limit = 16
    w = few_rows_weight(layout, 1000, 300)
    for m in sorted({2, 3, limit // 2 + 1, limit, limit + 1}):
        x = rows(m, 300)
        info = kernel_info(x, w, precision=precision)
        chosen = few_rows_kernel_named(info, m)
        assert chosen == (m <= limit), (m, info)
        out = poisoned_matmul(x, w, precision)
        assert_matmul_close(out, x, w, precision="ieee" if chosen else precision)
        if chosen:
            with pygpukit_torch.force_kernel("gemv"):
                torch.testing.assert_close(poisoned_matmul(x, w, precision), out, rtol=0, atol=0)


def test_few_rows_automatic_choice_defers_to_a_forced_kernel():
    """Another forced kernel that runs the problem takes it, not the GEMV."""
    x, w = rows(2, 300), rows(1000, 300)
    forced = {"skinny": "skinny", "mma_sync": "mma_sync"}
    if kernel_runs_here("wgmma"):
        forced["wgmma"] = "wgmma"
    for kernel, name in forced.items():
        with pygpukit_torch.force_kernel(kernel):
            for precision in ("tf32", "tf32x3"):
                assert name in kernel_info(x, w.mT, precision=precision), (kernel, precision)
            assert_matmul_close(poisoned_matmul(x, w.mT), x, w.mT)
    with pygpukit_torch.force_kernel("fma"):
        assert kernel_info(x, w.mT, precision="ieee").startswith("fma"), kernel_info(x, w.mT, precision="ieee")


@pytest.mark.parametrize("m", [3, 6])
def test_few_rows_of_misaligned_x_tf32x3(m):
    """x not 16-byte aligned: the GEMVs cannot read it. On Hopper the wgmma
    kernel that splits W in registers packs x's parts and reads W in place;
    elsewhere 3xTF32 packs both operands' big and small parts (3K columns)
    and runs them as TF32 would choose: the GEMV up to 4 rows, the skinny
    kernel above (the GEMV's FP32 advantage over 3 MMAs does not apply to
    the parts)."""
    k, n = 300, 1000
    x, w = torch.randn(m, k + 1, device="cuda")[:, 1:], rows(n, k)
    info = kernel_info(x, w.mT, precision="tf32x3")
    if kernel_runs_here("wgmma"):
        assert "B split into big and small TF32 parts in registers" in info, info
    else:
        assert "3K columns" in info and ("on gemv" if m <= 4 else "on skinny") in info, info
    out = poisoned_matmul(x, w.mT, "tf32x3")
    assert_matmul_close(out, x, w.mT, precision="tf32x3")
    assert rel_error(out, matmul_reference(x, w.mT)) < 1e-6


@pytest.mark.parametrize("layout", ["row-major", "K-major"])
@pytest.mark.parametrize("m", [2, 16])
def test_few_rows_error_at_most_cublas_fp32(m, layout):
    """The bar for serving 3xTF32: no less accurate than cuBLAS FP32."""
    torch.manual_seed(2)
    x, w = torch.randn(m, 4096, device="cuda"), few_rows_weight(layout, 4096, 4096).normal_()
    ref = matmul_reference(x, w)
    with cublas_tf32(False):
        cublas = rel_error(torch.matmul(x, w), ref)
    with pygpukit_torch.force_kernel("gemv"):
        assert few_rows_kernel_named(kernel_info(x, w), m), kernel_info(x, w)
        assert rel_error(matmul_tf32(x, w), ref) <= cublas


@pytest.mark.parametrize("m", [2, 16])
@pytest.mark.parametrize("layout", ["row-major", "K-major"])
def test_few_rows_deterministic_over_500_calls(layout, m):
    x, b = rows(m, 4099), torch.randn(300, device="cuda")
    w = few_rows_weight(layout, 300, 4099)
    with pygpukit_torch.force_kernel("gemv"):
        info = kernel_info(x, w)
        # Several K-splits or K-slices ("K-slices" in the plural):
        assert few_rows_kernel_named(info, m) and ("split-K" in info or "K-slices per output" in info), info
        first = linear_tf32(x, w.mT, b, "gelu")
        for _ in range(500):
            assert torch.equal(linear_tf32(x, w.mT, b, "gelu"), first)
