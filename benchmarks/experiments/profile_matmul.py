"""Runs one matmul_tf32 shape a few times, for a profiler to attach to:

    ncu --clock-control none -k regex:gemm -c 1 --set full python benchmarks/experiments/profile_matmul.py 4096 4096 4096 [--layout nt]
"""

import argparse

import torch

import pygpukit_torch

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("shape", nargs="*", type=int, default=[4096, 4096, 4096], help="M N K (default 4096 4096 4096)")
parser.add_argument("--layout", default="nn", choices=["nn", "nt", "tn", "tt"],
                    help="n: row-major operand, t: a transposed view (column-major)")
args = parser.parse_args()
if len(args.shape) != 3:
    parser.error("expected three sizes: M N K")
if not torch.cuda.is_available():
    raise SystemExit("profile_matmul.py needs a CUDA GPU (torch.cuda.is_available() is False)")
m, n, k = args.shape
a = torch.randn(m, k, device="cuda") if args.layout[0] == "n" else torch.randn(k, m, device="cuda").t()
b = torch.randn(k, n, device="cuda") if args.layout[1] == "n" else torch.randn(n, k, device="cuda").t()
print(pygpukit_torch.kernel_info(a, b))
for _ in range(3):
    pygpukit_torch.matmul_tf32(a, b)
torch.cuda.synchronize()
