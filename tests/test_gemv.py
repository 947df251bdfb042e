"""The single-row kernel (csrc/cuda/gemv.cu): x[1, K] @ w[N, K].T in FP32
FMAs for every precision, with x and w K-major and 16-byte aligned. Values
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
                      matmul_reference, poison_next_output, poisoned_matmul, rel_error)

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
    assert info.startswith("gemv") or info.startswith("FP32 (one row"), info
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
    gemv_choice: ~30 warps per SM); K tails inside the last slice, slices
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
    # two rows, a weight row that is not 16-byte aligned, a row-major B.
    cases = {"two rows": (rows(2, 1000), w.mT),
             "unaligned weight": (x, torch.randn(300 * 1000 + 1, device="cuda")[1:].view(300, 1000).mT),
             "row-major B": (x, w.mT.contiguous())}
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
