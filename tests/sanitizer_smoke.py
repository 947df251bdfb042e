"""A small GPU workload for compute-sanitizer (memcheck, racecheck): every
kernel configuration, layout and load width on edge-heavy shapes.

    compute-sanitizer --tool memcheck python tests/sanitizer_smoke.py
"""

import os

import torch

import pygpukit_torch

torch.manual_seed(0)
cases = [(1, 1, 1), (67, 45, 131), (130, 260, 37), (257, 129, 65)]
for kernel in ("wgmma", "mma_sync_large", "mma_sync_medium", "mma_sync_small", "fma"):
    os.environ["PYGPUKIT_KERNEL"] = kernel
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
torch.cuda.synchronize()
print("sanitizer smoke: all cases ran and matched")
