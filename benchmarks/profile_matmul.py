"""Runs one matmul_tf32 shape a few times, for a profiler to attach to:

    ncu --clock-control none -k regex:gemm -c 1 --set full python benchmarks/profile_matmul.py 4096 4096 4096
"""

import sys

import torch

import pygpukit_torch

m, n, k = (int(x) for x in sys.argv[1:4]) if len(sys.argv) >= 4 else (4096, 4096, 4096)
layout = sys.argv[4] if len(sys.argv) >= 5 else "nn"
a = torch.randn(m, k, device="cuda") if layout[0] == "n" else torch.randn(k, m, device="cuda").t()
b = torch.randn(k, n, device="cuda") if layout[1] == "n" else torch.randn(n, k, device="cuda").t()
print(pygpukit_torch.kernel_info(a, b))
for _ in range(3):
    pygpukit_torch.matmul_tf32(a, b)
torch.cuda.synchronize()
