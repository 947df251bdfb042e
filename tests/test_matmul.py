"""Values of pygpukit::matmul_tf32 against a float64 product of the same
inputs, over shapes, layouts, strides, batching and special values."""

import contextlib
import re

import pytest
import torch

import pygpukit_torch
from pygpukit_torch import matmul_tf32
from pygpukit_torch.testing import cublas_tf32
from conftest import (DEVICE_KERNELS, DEVICES, assert_linear_close, assert_matmul_close, kernel_runs_here,
                      matmul_reference, neg_bit_view, poison_next_output, poisoned_matmul, rel_error, requires_cuda,
                      requires_two_gpus, skip_unless_config_fits, skip_unless_path_taken, CUDA_KERNELS)


run = poisoned_matmul


SQUARES = [1, 2, 3, 7, 8, 16, 31, 64, 127, 128, 255, 256, 511, 1024]
ODD = [(1, 1, 1), (17, 33, 65), (127, 129, 131), (1, 4096, 4096), (4096, 1, 300), (300, 4096, 1),
       (65, 1, 77), (200, 300, 5), (33, 257, 1000)]
SMALL_K = [(37, 45, k) for k in range(1, 41)]


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
@pytest.mark.parametrize("n", SQUARES)
def test_squares(device, kernel, n):
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    assert_matmul_close(run(a, b), a, b)


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
@pytest.mark.parametrize("m,n,k", ODD + SMALL_K)
def test_odd_shapes(device, kernel, m, n, k):
    a, b = torch.randn(m, k, device=device), torch.randn(k, n, device=device)
    assert_matmul_close(run(a, b), a, b)


@requires_cuda
@pytest.mark.parametrize("kernel", CUDA_KERNELS)
@pytest.mark.parametrize("m,n,k", [(2048, 2048, 2048), (4096, 4096, 4096), (4095, 4097, 4099),
                                   (512, 11008, 4096), (256, 14336, 8192), (8192, 512, 1024)])
def test_large_shapes_cuda(m, n, k, kernel):
    a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
    assert_matmul_close(run(a, b), a, b)


@requires_cuda
@pytest.mark.parametrize("config,tile,copy_bytes", [
    ("mma_sync_large", "256x128x32", 16), ("mma_sync_medium", "128x128x32", 16),
    ("mma_sync_small", "64x64x32", 16), ("mma_sync_medium", "128x128x32", 4),
    ("mma_sync_small", "64x64x32", 4), ("mma_sync_compact", "128x128x32 warp 64x32 stages 3", 16),
    ("mma_sync_compact", "128x128x32 warp 64x32 stages 3", 4)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_mma_sync_interior_and_edge_tiles(config, tile, copy_bytes, layout):
    """Output tiles partly inside M and N and partly on their edges, with a K
    tail and a batch of two, on each tile configuration and copy width.
    16-byte copies (operands aligned, sizes multiples of 4): interior tiles
    run the unpredicated mainloop for all but their last k-tiles, edge tiles
    the predicated one; which loop runs is decided per threadblock (a
    per-thread choice split warps between the loops on edge tiles and hung).
    4-byte copies: odd sizes and base pointers 4 bytes off. Column-major A
    feeds mma row g + 8h from tile row 2g + h, which the epilogue must follow
    on partial tiles too."""
    batch, m, n, k = (2, 300, 520, 1000) if copy_bytes == 16 else (2, 301, 517, 999)
    skew = 0 if copy_bytes == 16 else 1  # elements cut off the front of each stored row

    def operand(rows, cols, transposed):
        shape = (batch, cols, rows + skew) if transposed else (batch, rows, cols + skew)
        x = torch.randn(shape, device="cuda")[..., skew:]
        return x.transpose(1, 2) if transposed else x

    a = operand(m, k, layout[0] == "t")
    b = operand(k, n, layout[1] == "t")
    with pygpukit_torch.force_kernel(config):
        info = pygpukit_torch.kernel_info(a, b)
        skip_unless_config_fits(info, f"mma_sync {tile}", config)
        assert info.startswith(f"mma_sync {tile}") and f"{copy_bytes}-byte loads" in info, info
        out = run(a, b)
    assert_matmul_close(out, a, b)


@requires_cuda
@pytest.mark.parametrize("m,n,k", [(256, 256, 256), (1024, 1024, 1024), (4096, 4096, 4096),
                                   (4095, 4097, 4099), (2048, 512, 8192)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("kernel", CUDA_KERNELS)
def test_error_matches_cublas_tf32(m, n, k, layout, kernel):
    """Round-to-nearest inputs give cuBLAS TF32's error; truncation is ~2.6x worse."""
    a = torch.randn(m, k, device="cuda") if layout[0] == "n" else torch.randn(k, m, device="cuda").t()
    b = torch.randn(k, n, device="cuda") if layout[1] == "n" else torch.randn(n, k, device="cuda").t()
    ref = matmul_reference(a, b)
    ours = rel_error(run(a, b), ref)
    with cublas_tf32(True):
        cublas = rel_error(torch.matmul(a, b), ref)
    assert ours <= 1.05 * cublas, (ours, cublas)


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
def test_rounds_to_nearest_not_truncates(device, kernel):
    # 1 + 2^-11 + 2^-12 lies above the midpoint between the TF32 neighbours 1
    # and 1 + 2^-10: round to nearest gives 1 + 2^-10, truncation gives 1.
    n = 1024
    x = torch.eye(n, device=device) * (1 + 2 ** -11 + 2 ** -12)
    out = matmul_tf32(x, torch.eye(n, device=device))
    assert torch.equal(out.diagonal(), torch.full((n,), 1 + 2 ** -10, device=device))
    assert int((out != 0).sum()) == n


def _operand(rows, cols, kind, device):
    """A rows x cols matrix stored as `kind`."""
    if kind == "row":
        return torch.randn(rows, cols, device=device)
    if kind == "col":
        return torch.randn(cols, rows, device=device).t()
    if kind == "offset":  # base pointer 4 bytes past a 16-byte boundary, ld odd
        return torch.randn(rows + 1, cols + 3, device=device)[1:, 3:]
    if kind == "offset_col":
        return torch.randn(cols + 1, rows + 2, device=device)[1:, 2:].t()
    if kind == "strided":  # every other column: neither row- nor column-major
        return torch.randn(rows, 2 * cols, device=device)[:, ::2]
    if kind == "expanded_rows":  # stride 0 between rows
        return torch.randn(1, cols, device=device).expand(rows, cols)
    if kind == "expanded_cols":  # stride 0 between columns
        return torch.randn(rows, 1, device=device).expand(rows, cols)
    raise ValueError(kind)


KINDS = ["row", "col", "offset", "offset_col", "strided", "expanded_rows", "expanded_cols"]


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
@pytest.mark.parametrize("kind_a", KINDS)
@pytest.mark.parametrize("kind_b", KINDS)
@pytest.mark.parametrize("m,n,k", [(67, 45, 131), (256, 128, 64)])
def test_layouts_and_strides(device, kernel, kind_a, kind_b, m, n, k):
    a, b = _operand(m, k, kind_a, device), _operand(k, n, kind_b, device)
    assert_matmul_close(run(a, b), a, b)


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
@pytest.mark.parametrize("a_shape,b_shape", [
    ((5,), (5,)), ((5,), (5, 3)), ((4, 5), (5,)), ((3, 4, 5), (5,)), ((5,), (2, 5, 3)),
    ((3, 4, 5), (5, 6)), ((4, 5), (3, 5, 6)), ((2, 3, 4, 5), (3, 5, 6)), ((2, 1, 4, 5), (1, 3, 5, 6)),
    ((7, 1, 33, 17), (5, 17, 9)), ((6, 130, 70), (6, 70, 129)),
])
def test_batched_broadcast(device, kernel, a_shape, b_shape):
    a, b = torch.randn(a_shape, device=device), torch.randn(b_shape, device=device)
    out = run(a, b)
    assert out.shape == torch.matmul(a, b).shape
    assert_matmul_close(out, a, b)


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
def test_batched_transposed_and_expanded(device, kernel):
    a = torch.randn(4, 40, 30, device=device).mT          # [4, 30, 40], column-major matrices
    b = torch.randn(40, 20, device=device).expand(4, 40, 20)  # batch stride 0
    assert_matmul_close(run(a, b), a, b)
    c = torch.randn(3, 1, 30, 40, device=device).expand(3, 5, 30, 40)
    d = torch.randn(5, 40, 20, device=device)
    assert_matmul_close(run(c, d), c, d)


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
@pytest.mark.parametrize("a_shape,b_shape,neg", [
    ((1, 300), (300, 64), "a"),      # one row: read in place (M = 1's GEMV on CUDA)
    ((64, 300), (300, 1), "b"),      # one column
    ((67, 1), (1, 45), "ab"),
    ((130, 70), (70, 129), "ab"),    # contiguous views: read in place too
    ((3, 40, 30), (30, 20), "a"),
])
def test_negative_bit_views(device, kernel, a_shape, b_shape, neg):
    """Our kernels read memory, where such a view holds the negation of its
    values: ATen's Negative dispatch key resolves the bit (its fallback
    materializes the view) before any backend kernel of our ops runs, on CPU
    and CUDA alike; this checks that end to end."""
    a, b = torch.randn(a_shape, device=device), torch.randn(b_shape, device=device)
    out = run(neg_bit_view(a) if "a" in neg else a, neg_bit_view(b) if "b" in neg else b)
    assert_matmul_close(out, a, b)


def test_negative_bit_view_of_complex_imag():
    """The public way to get such a view: `z.conj().imag`."""
    z = torch.randn(1, 64, dtype=torch.complex64)
    x = z.conj().imag
    assert x.is_neg()
    w = torch.randn(64, 32)
    assert_matmul_close(run(x, w), -z.imag.clone(), w)
    if torch.cuda.is_available():
        xc, wc = z.cuda().conj().imag, w.cuda()
        assert xc.is_neg()
        assert_matmul_close(run(xc, wc), -z.imag.clone().cuda(), wc)


@requires_cuda
def test_large_batch_count_loops_over_grid_limit():
    a, b = torch.randn(70000, 3, 5, device="cuda"), torch.randn(70000, 5, 2, device="cuda")
    assert_matmul_close(run(a, b), a, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("a_shape,b_shape", [((0, 5), (5, 3)), ((4, 5), (5, 0)), ((4, 0), (0, 3)),
                                             ((0,), (0,)), ((2, 0, 5), (5, 3)), ((0, 4, 5), (5, 3))])
def test_empty(device, a_shape, b_shape):
    a, b = torch.randn(a_shape, device=device), torch.randn(b_shape, device=device)
    out = run(a, b)
    assert out.shape == torch.matmul(a, b).shape
    assert torch.equal(out, torch.zeros_like(out))  # K = 0 gives zeros


@pytest.mark.parametrize("device,kernel", DEVICE_KERNELS)
@pytest.mark.parametrize("precision", ["tf32", "ieee"])
def test_nan_inf_propagate_like_torch(device, kernel, precision):
    a, b = torch.randn(64, 48, device=device), torch.randn(48, 40, device=device)
    a[3, 5], a[10, 7], b[2, 9], b[20, 30] = float("nan"), float("inf"), float("-inf"), float("inf")
    a[11, :], b[:, 31] = 0.0, 0.0
    a[11, 20] = float("inf")  # inf * finite and 0 * inf
    out = run(a, b, precision=precision)  # poisoned: an unwritten element shows as NaN
    ref = torch.matmul(a.double(), b.double())
    assert torch.equal(out.isnan(), ref.isnan())
    assert torch.equal(out.isinf(), ref.isinf())
    assert torch.equal(out.isinf() & (out > 0), ref.isinf() & (ref > 0))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (127, 129, 131), (300, 200, 100), (64, 1, 4096)])
def test_ieee_precision(device, m, n, k):
    a, b = torch.randn(m, k, device=device), torch.randn(k, n, device=device)
    out = run(a, b, precision="ieee")
    assert_matmul_close(out, a, b, precision="ieee")


@requires_cuda
@pytest.mark.parametrize("kernel", CUDA_KERNELS)
def test_bitwise_repeatable(kernel):
    # These paths sum in an order fixed by construction (split-K partials
    # by a pass of their own, K-slices in index order): a smoke test for a
    # data race, which tests/sanitizer_smoke.py's racecheck looks for
    # directly. Stream-K, whose order depends on arrival, is tested below.
    a, b = torch.randn(1000, 700, device="cuda"), torch.randn(700, 900, device="cuda")
    first = matmul_tf32(a, b)
    for _ in range(100):
        assert torch.equal(matmul_tf32(a, b), first)


# Paths whose result is a sum in a fixed order of several partial products
# (split-K's reduction pass, stream-K's segments, 3xTF32's promotions): each
# (x shape, weight shape, weight stored transposed, precision, forced kernel,
# what kernel_info must name: every one of these words).
DETERMINISM_CASES = {
    "split-K x @ W, M = 16": ((16, 4096), (4096, 4096), False, "tf32", None, ("split-K",)),
    "split-K x @ W.T, M = 128": ((128, 4096), (4096, 4096), True, "tf32", None, ("split-K",)),
    "stream-K last wave": ((100, 4096), (4096, 20000), False, "tf32", None, ("stream-K",)),
    "3xTF32 promoted (wgmma)": ((512, 1024), (1024, 768), False, "tf32x3", None, ("wgmma", "promoted")),
    "3xTF32 promoted (mma.sync)": ((512, 1024), (1024, 768), False, "tf32x3", "mma_sync", ("mma_sync", "promoted")),
    "FP32 split-K x @ W.T, M = 128": ((128, 4096), (4096, 4096), True, "ieee", None, ("fma 128x128", "split-K")),
    "FP32 split-K x @ W.T, M = 32": ((32, 4096), (4096, 4096), True, "ieee", None, ("fma 64x64", "split-K")),
}


@requires_cuda
@pytest.mark.parametrize("case", list(DETERMINISM_CASES))
def test_deterministic_over_500_calls(case):
    """Bitwise the same result over 500 calls (the determinism target)
    on the paths that add partial products, each asserted to be taken."""
    x_shape, w_shape, transposed, precision, kernel, expect = DETERMINISM_CASES[case]
    if kernel is None and precision != "ieee" and not kernel_runs_here("wgmma"):
        pytest.skip("the wgmma kernel does not run on this GPU or build")
    torch.manual_seed(0)
    x = torch.randn(x_shape, device="cuda")
    w = torch.randn(w_shape[::-1], device="cuda").t() if transposed else torch.randn(w_shape, device="cuda")
    forced = (lambda: pygpukit_torch.force_kernel(kernel)) if kernel else contextlib.nullcontext
    with forced():
        info = pygpukit_torch.kernel_info(x, w, precision=precision)
    # Outside the forced block: inside it, skip_unless_path_taken counts the
    # forced kernel as a choice steered on purpose and would skip, not fail.
    skip_unless_path_taken(all(word in info for word in expect), f"{case}: took {info}")
    with forced():
        first = matmul_tf32(x, w, precision=precision)
        assert_matmul_close(first, x, w, precision)
        for _ in range(499):
            assert torch.equal(matmul_tf32(x, w, precision=precision), first)


@requires_cuda
def test_stream_k_bitwise_repeatable_while_another_stream_competes():
    """Stream-K's last wave: whichever cluster arrives last adds the
    segments' partial sums, in k order whatever the arrival order. A cuBLAS
    GEMM on a second stream at the same time delays some clusters and not
    others, call by call; every result must still be bitwise the first."""
    if not kernel_runs_here("wgmma"):
        pytest.skip("the wgmma kernel does not run on this GPU or build")
    torch.manual_seed(0)
    a, b = torch.randn(100, 4096, device="cuda"), torch.randn(4096, 20000, device="cuda")
    info = pygpukit_torch.kernel_info(a, b)
    skip_unless_path_taken("stream-K" in info, f"no partial last wave on this GPU: {info}")
    first = matmul_tf32(a, b)
    c = torch.randn(2048, 2048, device="cuda")
    side = torch.cuda.Stream()
    for i in range(200):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(i % 3):  # 0 to 2 GEMMs ahead of ours: a different overlap each call
                torch.matmul(c, c)
        assert torch.equal(matmul_tf32(a, b), first)
    torch.cuda.current_stream().wait_stream(side)


@requires_two_gpus
def test_tensor_on_cuda1_while_cuda0_current():
    with torch.cuda.device(0):
        a, b = torch.randn(300, 200, device="cuda:1"), torch.randn(200, 100, device="cuda:1")
        out = matmul_tf32(a, b)
        assert out.device == torch.device("cuda:1")
        assert_matmul_close(out, a, b)


def captured_matmul(a, b):
    """matmul_tf32(a, b) captured in a CUDA graph, after a warm-up call on a
    side stream (it sets the kernels' shared-memory attributes outside the
    capture): the graph and the output tensor its replays write."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        matmul_tf32(a, b)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = matmul_tf32(a, b)
    return graph, out


@requires_cuda
@pytest.mark.parametrize("kernel", CUDA_KERNELS)
def test_cuda_graph_capture_and_replay(kernel):
    a, b = torch.randn(300, 200, device="cuda"), torch.randn(200, 100, device="cuda")
    g, out = captured_matmul(a, b)
    a.copy_(torch.randn_like(a))
    b.copy_(torch.randn_like(b))
    g.replay()
    torch.cuda.synchronize()
    assert_matmul_close(out, a, b)


@requires_cuda
@pytest.mark.parametrize("kernel", CUDA_KERNELS)
def test_more_than_2_31_elements(kernel):
    # A has 2^31 + 4096·8 elements: offsets past 2^31 must not wrap.
    m, k, n = 2 ** 31 // 4096 + 8, 4096, 8
    a = torch.empty(m, k, device="cuda")
    a.normal_()
    b = torch.randn(k, n, device="cuda")
    out = run(a, b)
    rows = slice(m - 64, m)  # the rows whose offsets exceed 2^31
    assert_matmul_close(out[rows].contiguous(), a[rows], b)
    del a


@requires_cuda
def test_2_31_rows_or_more_leave_the_wgmma_path():
    # The wgmma kernels give TMA 32-bit coordinates: rows from 2^31 on would
    # read zeros and drop their stores. Expanded rows keep A small; the
    # output takes 8 GiB.
    m = 2 ** 31 + 256
    a = torch.randn(1, 32, device="cuda").expand(m, 32)
    b = torch.randn(32, 1, device="cuda")
    assert not pygpukit_torch.kernel_info(a, b).startswith("wgmma")
    out = poisoned_matmul(a, b)
    assert_matmul_close(out[-256:].contiguous(), a[-256:], b)
    assert bool((out == out[0]).all())  # every row is a[0] @ b
    del out


# The FP32 kernel (fma_gemm.cu, precision "ieee"): (m, n, k, its tile) with
# edges of both tiles and of BK, and split-K counts from 1 to 16 (on 132
# SMs: 1, 5, 11, 4, 1, 16 and 16 ranges; split-K cuts K into whole k-tiles,
# so 16 ranges of K = 4097 leave 17 and 137 columns to the last one).
FMA_CASES = [(300, 200, 100, "fma 128x128"), (1000, 700, 4099, "fma 128x128"), (1000, 40, 3000, "fma 64x64"),
             (129, 4100, 1031, "fma 128x128"), (65, 3000, 77, "fma 128x128"), (64, 64, 4097, "fma 64x64"),
             (128, 128, 4097, "fma 128x128")]


@requires_cuda
@pytest.mark.parametrize("kind_a", ["row", "col", "offset", "offset_col"])
@pytest.mark.parametrize("kind_b", ["row", "col", "offset", "offset_col"])
@pytest.mark.parametrize("m,n,k,tile", FMA_CASES)
def test_fma_kernel_tiles_layouts_and_split_k(kind_a, kind_b, m, n, k, tile):
    a, b = _operand(m, k, kind_a, "cuda"), _operand(k, n, kind_b, "cuda")
    info = pygpukit_torch.kernel_info(a, b, precision="ieee")
    skip_unless_path_taken(info.startswith(tile), f"took {info}")
    assert_matmul_close(run(a, b, precision="ieee"), a, b, precision="ieee")


@requires_cuda
@pytest.mark.parametrize("m", [32, 128, 3000])
def test_fma_kernel_split_k_applies_the_epilogue_once(m):
    # Split-K's partials are raw sums; bias and activation belong to the
    # reduction only (m = 32 and 128 split K, 3000 does not on 132 SMs).
    x, w, bias = torch.randn(m, 2048, device="cuda"), torch.randn(1536, 2048, device="cuda"), torch.randn(1536, device="cuda")
    info = pygpukit_torch.kernel_info(x, w.t(), precision="ieee")
    skip_unless_path_taken(info.startswith("fma") and ("split-K" in info) == (m < 3000), f"took {info}")
    poison_next_output((m, 1536), "cuda")
    out = pygpukit_torch.linear_tf32(x, w, bias, "gelu", precision="ieee")
    assert_linear_close(out, x, w, bias, "gelu", precision="ieee")


@requires_cuda
def test_fma_kernel_past_65535_column_tiles():
    # N / 64 (the 64x64 tile, for 3 rows) above the grid's y limit: the
    # launch failed ("invalid configuration argument") before the kernel
    # looped over column tiles.
    a, b = torch.randn(3, 8, device="cuda"), torch.randn(8, 65535 * 64 + 100, device="cuda")
    with pygpukit_torch.force_kernel("fma"):
        assert pygpukit_torch.kernel_info(a, b).startswith("fma")
        out = poisoned_matmul(a, b)
    assert_matmul_close(out, a, b, precision="ieee")


@requires_cuda
def test_kernel_info_of_empty_batches_and_huge_expanded_products():
    # An empty batch launches nothing; M * N * K = 2^64 (expanded operands)
    # overflowed to 0 and was reported as an empty product.
    assert pygpukit_torch.kernel_info(torch.randn(0, 4, 5, device="cuda"),
                                      torch.randn(5, 3, device="cuda")).startswith("none")
    # One row or column of data each: kernel_info of operands with strides
    # (0, 0) copied them whole (32 TiB) before choosing.
    a = torch.randn(1, 2 ** 22, device="cuda").expand(2 ** 21, 2 ** 22)
    b = torch.randn(2 ** 22, 1, device="cuda").expand(2 ** 22, 2 ** 21)
    info = pygpukit_torch.kernel_info(a, b)
    assert not info.startswith("none")
    if kernel_runs_here("wgmma"):  # the same count in int64 wrapped to 0: "too small for wgmma"
        assert info.startswith("wgmma"), info


@requires_cuda
def test_kernel_info_of_tf32x3_past_the_split_kernels_coordinates():
    # The kernel that splits 3xTF32's weight in registers packs x into three
    # parts of packed_ld(K) columns each; past K = 715,827,872 their TMA
    # coordinates overflowed int32, so the dispatcher must choose another.
    if torch.cuda.get_device_capability(0) != (9, 0):
        pytest.skip("the split kernel runs on sm_90 only")
    if torch.cuda.get_device_properties(0).total_memory < 40 * 2 ** 30:
        pytest.skip("needs a 12 GB weight")
    fits = 715_827_872  # 3 packed_ld(K) = 2^31 - 32
    k = fits + 64  # a multiple of 4: the weight's rows stay 16-byte aligned for TMA
    w = torch.empty(4, k, device="cuda")  # K-major, read in place
    x = torch.randn(1, k, device="cuda").expand(20, k)
    with pygpukit_torch.force_kernel("wgmma_swap_ab"):
        fitting = pygpukit_torch.kernel_info(x[:, :fits], w[:, :fits].t(), precision="tf32x3")
        too_long = pygpukit_torch.kernel_info(x, w.t(), precision="tf32x3")
    assert "in registers" in fitting, fitting
    assert "in registers" not in too_long, too_long


@requires_cuda
@pytest.mark.parametrize("case", ["tails", "batched", "broadcast_b", "broadcast_a", "split_k", "odd_n",
                                  "linear_gelu", "linear_odd_n", "odd_k_tiles_many_tiles", "n_under_cluster",
                                  "narrow_m1", "narrow_m16", "narrow_m16_split_k", "narrow_batched",
                                  "narrow_linear_odd_n", "medium_m100_split_k",
                                  "medium_linear_m100_odd_n", "medium_ring_m128", "medium_ring_batched",
                                  "medium_ring_linear_odd_k"])
def test_swap_ab_path(case):
    """The wgmma kernel's SwapAB variant (a @ b with both operands row-major,
    B read in place): M, N and K tails, batches with either operand broadcast,
    split-K, an output whose rows are not 16-byte aligned (copied out by the
    warpgroup instead of TMA-stored), linear_tf32's fused bias and
    activation on a weight stored [in, out], an odd k-tile count (the peeled
    first k-tile) on CTAs that run several work tiles, and N below one
    cluster's two tiles (the second lies wholly past C's last column); and
    the tiles of decode-sized M, 64 rows of C up to M = 64 (narrow_*) and
    128 above (medium_*): one row, 16 rows (the other rows of the tile are
    not loaded), split-K, batches, a bias and activation with an output
    whose rows are not 16-byte aligned; and where the 128-row tile does not
    split K (medium_ring_*), the weight's own deeper ring: many tiles, batches,
    an odd k-tile count with a K tail and a fused bias and GELU."""
    if not kernel_runs_here("wgmma_swap_ab"):
        pytest.skip("the wgmma kernel does not run on this GPU or build")
    def row_major(*shape):  # 16-byte aligned rows even for an odd last dimension
        return torch.randn(*shape[:-1], (shape[-1] + 3) // 4 * 4, device="cuda")[..., :shape[-1]]
    x_bias_act = None
    if case == "tails":
        a, b = row_major(300, 77), row_major(77, 200)
    elif case == "batched":
        a, b = row_major(3, 260, 96), row_major(3, 96, 388)
    elif case == "broadcast_b":
        a, b = row_major(2, 3, 260, 96), row_major(96, 388)
    elif case == "broadcast_a":
        a, b = row_major(260, 96), row_major(3, 96, 388)
    elif case == "split_k":
        a, b = row_major(256, 8192), row_major(8192, 256)
    elif case == "odd_n":
        a, b = row_major(1000, 1000), row_major(1000, 1001)
    elif case == "odd_k_tiles_many_tiles":  # 3 k-tiles, 128 clusters > one per SM pair
        a, b = row_major(4096, 96), row_major(96, 2048)
    elif case == "n_under_cluster":
        a, b = row_major(300, 64), row_major(64, 100)
    elif case == "narrow_m1":
        a, b = row_major(1, 1000), row_major(1000, 4100)
    elif case == "narrow_m16":
        a, b = row_major(16, 777), row_major(777, 1000)
    elif case == "narrow_m16_split_k":
        a, b = row_major(16, 4096), row_major(4096, 1000)
    elif case == "medium_m100_split_k":
        a, b = row_major(100, 4096), row_major(4096, 1000)
    elif case == "narrow_batched":
        a, b = row_major(3, 50, 96), row_major(3, 96, 388)
    elif case == "medium_ring_m128":  # 112 tiles of 128 columns, too many to split K
        a, b = row_major(128, 4096), row_major(4096, 14336)
    elif case == "medium_ring_batched":  # batches never split K
        a, b = row_major(3, 100, 96), row_major(3, 96, 388)
    elif case == "medium_ring_linear_odd_k":  # 17 k-tiles, the last 8 of K wide
        x, w_t, bias = row_major(100, 520), row_major(520, 9001), torch.randn(9001, device="cuda")
        a, b, x_bias_act = x, w_t, (bias, "gelu")
    elif case in ("narrow_linear_odd_n", "medium_linear_m100_odd_n"):
        m = 64 if case.startswith("narrow") else 100
        x, w_t, bias = row_major(m, 300), row_major(300, 1001), torch.randn(1001, device="cuda")
        a, b, x_bias_act = x, w_t, (bias, "relu")
    else:
        n = 1536 if case == "linear_gelu" else 1001
        x, w_t, bias = row_major(700, 512), row_major(512, n), torch.randn(n, device="cuda")
        a, b, x_bias_act = x, w_t, (bias, "gelu")
    with pygpukit_torch.force_kernel("wgmma_swap_ab"):
        assert "swap AB" in pygpukit_torch.kernel_info(a, b), pygpukit_torch.kernel_info(a, b)
        if case.endswith("split_k"):
            assert "split-K" in pygpukit_torch.kernel_info(a, b)
        tile = {"narrow": "wgmma 128x64x", "medium": "wgmma 128x128x"}.get(case.split("_")[0])
        if tile is not None:
            assert tile in pygpukit_torch.kernel_info(a, b), pygpukit_torch.kernel_info(a, b)
        if case.startswith("medium"):  # its own ring for the weight exactly where K is not split
            ring = "stages 8 (A: 4)" in pygpukit_torch.kernel_info(a, b)
            assert ring == ("split-K" not in pygpukit_torch.kernel_info(a, b)), pygpukit_torch.kernel_info(a, b)
        if x_bias_act is None:
            assert_matmul_close(run(a, b), a, b)
        else:
            bias, act = x_bias_act
            poison_next_output((a.shape[0], b.shape[1]), "cuda")
            out = pygpukit_torch.linear_tf32(a, b.t(), bias, act)
            assert_linear_close(out, a, b.t(), bias, act)


@requires_cuda
@pytest.mark.parametrize("m", [2, 16, 64, 100, 128])
def test_decode_a_at_b_reads_b_in_place(m):
    """x @ W with W stored [in, out] at decode-sized M: on Hopper the
    automatic choice reads W in place (the row-major GEMV up to 8 rows,
    SwapAB on 128-row tiles above) rather than packing it K-major on every
    call."""
    if not kernel_runs_here("wgmma_swap_ab"):
        pytest.skip("the wgmma kernel does not run on this GPU or build")
    x, w = torch.randn(m, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")
    info = pygpukit_torch.kernel_info(x, w)
    assert ("B read row by row" if m <= 8 else "swap AB") in info and "pack" not in info, info
    assert_matmul_close(run(x, w), x, w)


@requires_cuda
@pytest.mark.parametrize("layout", ["x @ W", "x @ W.T"])
@pytest.mark.parametrize("m", [16, 128, 200, 1024])
def test_weight_read_once_is_marked_evict_first(layout, m):
    """Where all M rows of x fit in one tile along M, each tile of the weight
    is loaded once, and the wgmma kernel marks those loads L2 evict-first
    (the split-K partials and x stay in L2): at decode sizes in both layouts,
    and wherever the tile covers M (x @ W at M = 200 on the 256-row SwapAB
    tile), also with a weight of its own per batch entry; not where several
    tiles along M read each weight tile, where batch entries share the
    weight, or where the weight arrives by multicast (a cluster along M
    without SwapAB)."""
    kernel = "wgmma_swap_ab" if layout == "x @ W" else "wgmma"
    if not kernel_runs_here(kernel):
        pytest.skip("the wgmma kernel does not run on this GPU or build")

    def weight_of(w):
        return w if layout == "x @ W" else w.mT

    def read_once(info):  # weight_read_once's rule, from the tile that kernel_info names
        tile_m, tile_n, cluster = map(int, re.search(r"wgmma (\d+)x(\d+)x\d+ .*?cluster (\d+)x1", info).groups())
        swap = "swap AB" in info
        return m <= (tile_n if swap else tile_m) and (swap or cluster == 1)

    x, b = torch.randn(m, 4096, device="cuda"), weight_of(torch.randn(4096, 4096, device="cuda"))
    with pygpukit_torch.force_kernel(kernel):
        info = pygpukit_torch.kernel_info(x, b)
        assert info.startswith("wgmma") and ("B read once" in info) == read_once(info), info
        if m != 200:  # the decode tiles always cover M; at 1024 no tile does
            assert ("B read once" in info) == (m <= 128), info
        assert_matmul_close(run(x, b), x, b)
        # Three batch entries, one weight. x's batch stride (m + 8 rows) keeps
        # them from folding into one GEMM of 3m rows.
        xs = torch.randn(3, m + 8, 4096, device="cuda")[:, :m]
        info = pygpukit_torch.kernel_info(xs, b)
        assert info.startswith("wgmma") and "B read once" not in info, info
        assert_matmul_close(run(xs, b), xs, b)
        # Three batch entries, a weight each: read once per entry.
        bs = weight_of(torch.randn(3, 4096, 4096, device="cuda"))
        info = pygpukit_torch.kernel_info(xs, bs)
        assert info.startswith("wgmma") and ("B read once" in info) == read_once(info), info
        assert_matmul_close(run(xs, bs), xs, bs)


@requires_cuda
@pytest.mark.parametrize("case", ["nn_square", "nt_large", "packed_tails", "batched", "linear_gelu",
                                  "medium_swap_ab", "narrow_swap_ab", "medium_nt", "narrow_nt",
                                  "low_fill"])
def test_stream_k_last_wave(case):
    """Problems whose work items fill their last wave only in part run that
    wave stream-K on the H200: its tiles' k-tiles split evenly over every
    cluster, the segments' partial sums added in k order by whichever comes
    last. Values against float64 with a poisoned output, M/N tails (pack
    path), batches, the fused epilogue, a 128-row SwapAB tile, and bitwise
    equal results over repeated calls (the order of the sums is fixed)."""
    if not kernel_runs_here("wgmma"):
        pytest.skip("the wgmma kernel does not run on this GPU or build")
    torch.manual_seed(0)
    bias_act = None
    # Cluster tiles on the H200's 66 two-SM slots (132 one-SM slots for the
    # 128-row SwapAB tile), last waves 15-52% full.
    if case == "nn_square":  # 32 x 32 tiles of 256 x 256, SwapAB
        a, b = torch.randn(8192, 1024, device="cuda"), torch.randn(1024, 8192, device="cuda")
    elif case == "nt_large":  # 9 x 18 tiles of 256 x 128
        a, b = torch.randn(2304, 4096, device="cuda"), torch.randn(2304, 4096, device="cuda").mT
    elif case == "packed_tails":  # rows past M and N in the last tiles, K not a multiple of 32,
        # and an output copied out by the warpgroups (rows not 16-byte aligned)
        a, b = torch.randn(2500, 3001, device="cuda"), torch.randn(3001, 1799, device="cuda")
    elif case == "batched":  # 4 x (4 x 10) tiles of 256 x 128
        a, b = torch.randn(4, 1024, 4096, device="cuda"), torch.randn(4, 4096, 1280, device="cuda")
    elif case == "linear_gelu":
        a, b = torch.randn(2304, 4096, device="cuda"), torch.randn(2304, 4096, device="cuda").div_(64).mT
        bias_act = (torch.randn(2304, device="cuda"), "gelu")
    elif case == "medium_swap_ab":  # 157 tiles of 128 columns on one-SM clusters
        a, b = torch.randn(100, 4096, device="cuda"), torch.randn(4096, 20000, device="cuda")
    elif case == "narrow_swap_ab":  # and on 64-row SwapAB tiles
        a, b = torch.randn(50, 4096, device="cuda"), torch.randn(4096, 20000, device="cuda")
    elif case == "medium_nt":  # the same on K-major 128 x 128 tiles
        a, b = torch.randn(100, 4096, device="cuda"), torch.randn(20000, 4096, device="cuda").mT
    elif case == "narrow_nt":  # and on 64 x 128 tiles
        a, b = torch.randn(50, 4096, device="cuda"), torch.randn(20000, 4096, device="cuda").mT
    else:  # low_fill: 140 tiles on 132 slots, each of the 8 last ones cut into ~16 segments
        a, b = torch.randn(100, 16384, device="cuda"), torch.randn(16384, 17920, device="cuda")
    info = pygpukit_torch.kernel_info(a, b)
    skip_unless_path_taken("stream-K" in info, f"no partial last wave on this GPU: {info}")
    if bias_act is None:
        out = run(a, b)
        assert_matmul_close(out, a, b)
        again = lambda: matmul_tf32(a, b)
    else:
        bias, act = bias_act
        poison_next_output((a.shape[0], b.shape[1]), "cuda")
        out = pygpukit_torch.linear_tf32(a, b.mT, bias, act)
        assert_linear_close(out, a, b.mT, bias, act)
        again = lambda: pygpukit_torch.linear_tf32(a, b.mT, bias, act)
    for _ in range(3):
        assert torch.equal(again(), out)


@requires_cuda
@pytest.mark.parametrize("m,n", [(1, 3), (3, 5), (7, 9), (9, 3)])
def test_unloaded_tile_rows_never_reach_the_output(m, n):
    """The Hopper kernel loads only the operand rows that exist, so the rest
    of a tile holds whatever an earlier GEMM left in shared memory: run one
    on NaN inputs first, then small products on every wgmma configuration
    that takes them (K-major tiles, SwapAB, packed operands)."""
    if not kernel_runs_here("wgmma"):
        pytest.skip("the wgmma kernel does not run on this GPU or build")
    nan = torch.full((1024, 1024), float("nan"), device="cuda")
    for kernel in ("wgmma", "wgmma_swap_ab"):
        with pygpukit_torch.force_kernel(kernel):
            matmul_tf32(nan, nan)
            for a, b in [(torch.randn(m, 300, device="cuda"), torch.randn(300, n + 1, device="cuda")[:, :n]),
                         (torch.randn(m, 300, device="cuda"), torch.randn(n, 300, device="cuda").mT),
                         (torch.randn(m, 300, device="cuda"), torch.randn(300, (n + 3) // 4 * 4, device="cuda")),
                         (torch.randn(3, m, 300, device="cuda"), torch.randn(3, 300, (n + 3) // 4 * 4, device="cuda"))]:
                info = pygpukit_torch.kernel_info(a, b)
                if kernel == "wgmma_swap_ab" and "swap AB" not in info:
                    continue  # SwapAB cannot run this layout or ld: not the kernel under test
                assert info.startswith("wgmma"), info
                assert_matmul_close(run(a, b), a, b)


@requires_cuda
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_split_k_in_a_cuda_graph(layout):
    """A decode-sized product that splits K (the GEMM's partial sums, then
    the reduction kernel) replays in a CUDA graph with fresh inputs copied
    in, bitwise equal to eager calls on the same inputs."""
    if not kernel_runs_here("wgmma"):
        pytest.skip("the wgmma kernel does not run on this GPU or build")
    x = torch.randn(64, 4096, device="cuda")
    w = torch.randn(4096, 4096, device="cuda")
    b = w if layout == "nn" else w.t().contiguous().t()  # nt: W stored [N, K], as F.linear's
    info = pygpukit_torch.kernel_info(x, b)
    skip_unless_path_taken("split-K" in info, f"no split-K here: {info}")
    graph, captured = captured_matmul(x, b)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        captured.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, matmul_tf32(x, b))
        assert_matmul_close(captured.clone(), x, b)


@requires_cuda
def test_stream_k_in_a_cuda_graph_and_on_two_streams():
    """The stream-K last wave's counter reset (a memset before the kernel)
    replays in a CUDA graph, and two such GEMMs on two streams at once (not
    all of either's clusters resident together) both finish correctly: no
    cluster waits on another."""
    if not kernel_runs_here("wgmma"):
        pytest.skip("the wgmma kernel does not run on this GPU or build")
    a, b = torch.randn(8192, 1024, device="cuda"), torch.randn(1024, 8192, device="cuda")
    info = pygpukit_torch.kernel_info(a, b)
    skip_unless_path_taken("stream-K" in info, f"no partial last wave on this GPU: {info}")
    eager = matmul_tf32(a, b)
    graph, captured = captured_matmul(a, b)
    for _ in range(3):
        captured.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, eager)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    for s in (s1, s2):
        s.wait_stream(torch.cuda.current_stream())
    outs = []
    for s in (s1, s2):
        with torch.cuda.stream(s):
            outs.append(matmul_tf32(a, b))
    torch.cuda.synchronize()
    for out in outs:
        assert torch.equal(out, eager)


@requires_cuda
@pytest.mark.parametrize("case,packed", [("k4100_nt", "A and B"), ("k4104_nt", None), ("a_16_bytes_off", "A"),
                                         ("k4100_nn", "A and B")])
def test_square_tiles_pack_rows_off_the_sectors(case, packed):
    """The 128 x 128 wgmma tiles read K-major operands in place only where
    every row starts on a 32-byte sector (ld a multiple of 8 floats, base
    pointer 32-byte aligned); rows that TMA could read but that sit 16 bytes
    off (K = 4100, a pointer 16 bytes in) are packed first. Which operands
    the dispatcher packs, and the values against float64 with a poisoned
    output."""
    if not kernel_runs_here("wgmma"):
        pytest.skip("the wgmma kernel does not run on this GPU or build")
    torch.manual_seed(0)
    m, n = 4095, 4097
    if case == "k4100_nt":
        a, b = torch.randn(m, 4100, device="cuda"), torch.randn(n, 4100, device="cuda").mT
    elif case == "k4104_nt":
        a, b = torch.randn(m, 4104, device="cuda"), torch.randn(n, 4104, device="cuda").mT
    elif case == "a_16_bytes_off":  # ld 4104 on the sectors, the base pointer 16 bytes past one
        a = torch.randn(m * 4104 + 4, device="cuda")[4:].view(m, 4104)
        b = torch.randn(n, 4104, device="cuda").mT
    else:  # B row-major with 4097 columns: packed on these tiles anyway
        a, b = torch.randn(m, 4100, device="cuda"), torch.randn(4100, n, device="cuda")
    info = pygpukit_torch.kernel_info(a, b)
    skip_unless_path_taken(info.startswith("wgmma 128x128x32"), f"not the 128 x 128 tiles on this GPU: {info}")
    assert ("after packing" in info) == (packed is not None), info
    if packed is not None:
        assert f"after packing {packed} K-major" in info, info
    assert_matmul_close(run(a, b), a, b)


# Run in a fresh process by the test below: every product's kernels launch
# there for the first time inside the capture, with no warm-up call.
FIRST_LAUNCH_IN_CAPTURE = """
import torch, pygpukit_torch
torch.manual_seed(0)
cases = {
    "stream-K": (torch.randn(8192, 1024, device="cuda"), torch.randn(1024, 8192, device="cuda")),
    "packed stream-K": (torch.randn(2500, 3001, device="cuda"), torch.randn(3001, 1799, device="cuda")),
    "split-K": (torch.randn(64, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda").mT),
    "decode m16": (torch.randn(16, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda").mT),
    "decode m1": (torch.randn(1, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")),
}
for name, (a, b) in cases.items():
    info = pygpukit_torch.kernel_info(a, b)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = pygpukit_torch.matmul_tf32(a, b)
    a.copy_(torch.randn_like(a))
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    error = float((captured.double() - ref).norm() / ref.norm())
    assert error < 1e-3, (name, info, error)
    assert torch.equal(captured, pygpukit_torch.matmul_tf32(a, b)), (name, info)
"""


@requires_cuda
def test_first_launch_inside_a_cuda_graph_capture():
    """Captured with no warm-up call, as a user's first step can be: each
    kernel's first launch in a process (which sets its shared-memory limit
    and, on the Hopper path, queries how many clusters fit) happens while the
    stream captures. The replay, on fresh inputs, must give the eager
    result. A fresh process, so that nothing ran before."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", FIRST_LAUNCH_IN_CAPTURE], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_cpu_emulation_keeps_broadcast_operands_unexpanded():
    # A weight expand()ed over a batch is one weight of data: the CPU
    # emulation rounds and converts only that, and hands at::matmul the
    # stride-0 views as torch.matmul gets them. It used to materialize every
    # temporary at the broadcast size (here 64 x 512 x 512 float64, 128 MB
    # each, ~1 GB at the peak of tf32x3). Measured in a fresh process, by its
    # peak resident memory (Linux: KB) around the calls.
    import subprocess
    import sys
    code = """
import resource, torch, pygpukit_torch
w = torch.randn(512, 512); x = torch.randn(64, 1, 512)
pygpukit_torch.matmul_tf32(x[:2], w.expand(2, 512, 512), precision="tf32x3")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ref = x.double() @ w.double()
for precision in ("ieee", "tf32", "tf32x3"):
    y = pygpukit_torch.matmul_tf32(x, w.expand(64, 512, 512), precision=precision)
    assert y.shape == (64, 1, 512), y.shape
    assert float((y.double() - ref).norm() / ref.norm()) < (1e-3 if precision == "tf32" else 1e-6)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) < 200, f"peak grew by {out.stdout.split()[-1]} MB"
