"""A small GPU workload for compute-sanitizer (memcheck, racecheck): every
kernel configuration, layout and load width on edge-heavy shapes, for
matmul_tf32 and for linear_tf32's fused epilogue.

    compute-sanitizer --tool memcheck python tests/sanitizer_smoke.py
"""

import contextlib

import torch
import torch.nn.functional as F

import pygpukit_torch

if not torch.cuda.is_available():
    raise SystemExit("tests/sanitizer_smoke.py needs a CUDA GPU (torch.cuda.is_available() is False)")
torch.manual_seed(0)
_forced = contextlib.ExitStack()


def force(kernel):
    """Forces `kernel` from here on (a force_kernel block left open)."""
    _forced.close()
    _forced.enter_context(pygpukit_torch.force_kernel(kernel))


# (3, 300, 1000): split-K on wgmma. skinny and gemv (forced) run the cases
# with m <= 16 and m = 1 where both operands are K-major and 16-byte aligned
# (b transposed, no offset; linear_tf32).
# The last case gives the skinny kernel its 32-column tile (two CTAs per SM)
# with a last CTA of 31 columns.
wide_n = 2 * 32 * torch.cuda.get_device_properties(0).multi_processor_count + 31
# (300, 260, 3000): split-K on wgmma_swap_ab (M > 128 and 16-byte aligned rows
# of a row-major B, which (257, 129, 65) lacks).
cases = [(1, 1, 1), (67, 45, 131), (130, 260, 37), (257, 129, 65), (3, 300, 1000), (7, 37, 1004), (16, wide_n, 65),
         (300, 260, 3000)]
# Every forceable name but "auto", "mma_sync" (one of its tiles, each forced
# here by name) and "ozaki" (precision "fp32" only, below).
for kernel in [k for k in pygpukit_torch.dispatch.KERNELS if k not in ("auto", "mma_sync", "ozaki")]:
    force(kernel)
    for m, n, k in cases:
        for ta in (False, True):
            for tb in (False, True):
                for offset in (0, 1):
                    a = torch.randn(k if ta else m, (m if ta else k) + offset, device="cuda")[:, offset:]
                    b = torch.randn(n if tb else k, (k if tb else n) + offset, device="cuda")[:, offset:]
                    a, b = (a.t() if ta else a), (b.t() if tb else b)
                    out = pygpukit_torch.matmul_tf32(a, b)
                    ref = a.double() @ b.double()
                    err = float((out.double() - ref).norm() / ref.norm())
                    assert err < 2e-3, (kernel, m, n, k, ta, tb, offset, err)
    # linear_tf32: the epilogue's bias reads and every activation, on the
    # same edge-heavy shapes (x [m, k], weight [n, k] read column-major; for
    # wgmma_swap_ab a transposed view of a row-major [k, n], i.e. B row-major).
    for m, n, k in cases:
        x, b = torch.randn(m, k, device="cuda"), torch.randn(n, device="cuda")
        w = torch.randn(k, n, device="cuda").t() if kernel == "wgmma_swap_ab" else torch.randn(n, k, device="cuda")
        for act, ref_fn in (("relu", F.relu), ("gelu", F.gelu), ("gelu_tanh", lambda z: F.gelu(z, approximate="tanh")),
                            ("silu", F.silu)):
            out = pygpukit_torch.linear_tf32(x, w, b, act)
            ref = ref_fn(F.linear(x.double(), w.double(), b.double()))
            err = float((out.double() - ref).norm())
            # Relative to the pre-activation's magnitude (|x| |w|^T + |b|): an
            # activation can shrink the output far below its input's rounding
            # error (ReLU to zero, GELU of a negative input), and none of these
            # has a slope above 1.13.
            scale = float((F.linear(x.double().abs(), w.double().abs(), b.double().abs())).norm())
            assert err <= 2e-3 * scale, (kernel, act, m, n, k, err, scale)
# Precision "fp32" forced onto the Ozaki kernels (Hopper; elsewhere it runs
# as "ieee"): statistics, residues, INT8 GEMMs and reconstruction on the same
# edge-heavy shapes, both layouts of each operand.
force("ozaki")
for m, n, k in cases:
    for ta in (False, True):
        for tb in (False, True):
            a = torch.randn(k, m, device="cuda").t() if ta else torch.randn(m, k, device="cuda")
            b = torch.randn(n, k, device="cuda").t() if tb else torch.randn(k, n, device="cuda")
            out = pygpukit_torch.matmul_tf32(a, b, precision="fp32")
            ref = a.double() @ b.double()
            err = float((out.double() - ref).norm() / ref.norm())
            assert err < 1e-6, ("ozaki", m, n, k, ta, tb, err)
# One row of x: the GEMV, for every K-slice count (N = per_sm x SMs + 1 takes
# 8, 4, 2 and 1 slices, dispatch.cu's gemv_kmajor_choice) with K tails, a 1-D x
# (any K) and weight rows 16-byte aligned (a view of padded rows), the fused
# epilogue, and a repeated last row in the last CTA.
force("auto")
sms = torch.cuda.get_device_properties(0).multi_processor_count
for per_sm, k in ((0, 1), (0, 131), (5, 1004), (10, 131), (20, 65), (40, 1000)):
    n = per_sm * sms + 45
    x, b = torch.randn(k, device="cuda"), torch.randn(n, device="cuda")
    w = torch.randn(n, (k + 3) // 4 * 4, device="cuda")[:, :k]
    assert pygpukit_torch.kernel_info(x, w.t()).startswith("gemv")
    out = pygpukit_torch.linear_tf32(x, w, b, "gelu")
    ref = F.gelu(F.linear(x.double(), w.double(), b.double()))
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-5, (n, k)
# One row of x on a row-major weight (x @ W, W [k, n]): the row-major GEMV,
# with split-K counts from 1 to 32, a chunk cut by N's end and a K tail.
for n, k in ((45, 1), (1001, 131), (4097, 4099), (4 * 128 * sms + 3, 70), (130, 4096)):
    x, b = torch.randn(k, device="cuda"), torch.randn(n, device="cuda")
    w = torch.randn(k, (n + 3) // 4 * 4, device="cuda")[:, :n]
    assert "B read row by row" in pygpukit_torch.kernel_info(x, w)
    out = pygpukit_torch.linear_tf32(x, w.t(), b, "gelu")
    ref = F.gelu(F.linear(x.double(), w.t().double(), b.double()))
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-5, (n, k)
# A few rows of x on a row-major weight, forced: the row-major GEMV built for
# 2, 4, 8 and 16 rows (rows past M repeat row M - 1, never stored), split-K
# from 1 up, N's end inside a chunk and a K tail; x's rows 16-byte aligned
# (views of padded rows); 17 to 64 rows in blocks of 16.
force("gemv")
for m, n, k in ((2, 45, 1), (3, 1001, 131), (5, 4097, 4099), (9, 4 * 128 * sms + 3, 70), (16, 130, 4096),
                (17, 1001, 131), (40, 130, 4096), (64, 45, 9)):
    x = torch.randn(m, (k + 3) // 4 * 4, device="cuda")[:, :k]
    b = torch.randn(n, device="cuda")
    w = torch.randn(k, (n + 3) // 4 * 4, device="cuda")[:, :n]
    assert f"{m} rows of A" in pygpukit_torch.kernel_info(x, w)
    out = pygpukit_torch.linear_tf32(x, w.t(), b, "gelu")
    ref = F.gelu(F.linear(x.double(), w.t().double(), b.double()))
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-5, (m, n, k)
# ... and on a K-major weight (linear_tf32's own layout): the few-rows GEMV,
# forced, with 1 to 8 K-slices, K tails, weight rows past N and rows of x
# past M in a CTA.
force("gemv")
for m, n, k in ((2, 45, 1), (3, 1001, 131), (5, 4097, 4099), (9, 4 * 16 * sms + 3, 70), (16, 130, 4096)):
    x = torch.randn(m, (k + 3) // 4 * 4, device="cuda")[:, :k]
    b = torch.randn(n, device="cuda")
    w = torch.randn(n, (k + 3) // 4 * 4, device="cuda")[:, :k]
    assert f"{m} rows of A" in pygpukit_torch.kernel_info(x, w.t())
    out = pygpukit_torch.linear_tf32(x, w, b, "gelu")
    ref = F.gelu(F.linear(x.double(), w.double(), b.double()))
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-5, (m, n, k)
# The skinny kernel's blocks of 16 rows (17 to 64), forced, in TF32 and in
# 3xTF32 (split in registers), with a K tail and N's end inside a CTA.
force("skinny")
for m, n, k in ((17, 45, 131), (33, 1001, 70), (64, 130, 4099)):
    x = torch.randn(m, (k + 3) // 4 * 4, device="cuda")[:, :k]
    b = torch.randn(n, device="cuda")
    w = torch.randn(n, (k + 3) // 4 * 4, device="cuda")[:, :k]
    for precision in ("tf32", "tf32x3"):
        info = pygpukit_torch.kernel_info(x, w.t(), precision=precision)
        assert "in blocks of 16 rows" in info and ("in registers" in info) == (precision == "tf32x3"), info
        out = pygpukit_torch.linear_tf32(x, w, b, "gelu", precision=precision)
        ref = F.gelu(F.linear(x.double(), w.double(), b.double()))
        assert float((out.double() - ref).norm() / ref.norm()) < 2e-3, (m, n, k, precision)
# 3xTF32 on the Hopper kernel that splits the weight in registers (forced
# wgmma; elsewhere the staged path): both weight layouts (each a view of
# rows padded to 16 bytes, which TMA needs), a part-filled
# last k-tile, N's end inside a tile, split-K (N = 300) and not (N = 8501,
# C's rows not 16-byte aligned), linear_tf32's epilogue in the kernel and in
# the split-K reduction, and the 64- and 128-row tiles.
force("wgmma")
probe = torch.empty(512, 512, device="cuda")
hopper = pygpukit_torch.kernel_info(probe, probe.t()).startswith("wgmma")  # else forced wgmma falls back
for m, n, k in ((1, 300, 1000), (17, 300, 99), (100, 8501, 70), (128, 300, 4099)):
    x, b = torch.randn(m, k, device="cuda"), torch.randn(n, device="cuda")
    for w in (torch.randn(k, (n + 3) // 4 * 4, device="cuda")[:, :n],
              torch.randn(n, (k + 3) // 4 * 4, device="cuda")[:, :k].t()):
        assert not hopper or "B split into big and small TF32 parts in registers" in \
            pygpukit_torch.kernel_info(x, w, precision="tf32x3"), (m, n, k)
        out = pygpukit_torch.matmul_tf32(x, w, precision="tf32x3")
        ref = x.double() @ w.double()
        assert float((out.double() - ref).norm() / ref.norm()) < 1e-6, (m, n, k)
    out = pygpukit_torch.linear_tf32(x, w.t(), b, "gelu", precision="tf32x3")
    ref = F.gelu(F.linear(x.double(), w.t().double(), b.double()))
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-6, (m, n, k)
# The Hopper path's stream-K last wave (its tiles' k-tiles spread over every
# cluster, partial sums through the workspace): nn (SwapAB) and nt, the
# latter with a fused epilogue, where the H200's schedule takes it.
force("auto")
for a, b in ((torch.randn(8192, 1024, device="cuda"), torch.randn(1024, 8192, device="cuda")),
             (torch.randn(2304, 4096, device="cuda"), torch.randn(2304, 4096, device="cuda").t())):
    if "stream-K" not in pygpukit_torch.kernel_info(a, b):
        continue
    out = pygpukit_torch.linear_tf32(a, b.t(), None, "gelu")
    ref = F.gelu(a.double() @ b.double())
    assert float((out.double() - ref).norm() / ref.norm()) < 2e-3
torch.cuda.synchronize()
print("sanitizer smoke: all cases ran and matched")
