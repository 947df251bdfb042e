"""What the Hopper path's stream-K last wave gains: the target set (and any
shapes given) with it, without it (PYGPUKIT_STREAM_K=0) and cuBLAS TF32,
interleaved (_common.time_interleaved) over input sets larger than L2.

Prints a Markdown table: microseconds per call (host time included), the
ratios, the relative error both ways and the kernel (which says "stream-K
last wave" where it applies); then the geometric means against cuBLAS.
The rule it informs is kStreamKMaxTailFill in csrc/cuda/wgmma_schedule.cuh:
with it, shapes whose last wave is fuller than that run the same kernel in
both columns.

    python benchmarks/bench_stream_k.py [--shapes 4096x4096x4096,...] [--min-run-time 0.4]
"""

import argparse
import contextlib

import torch

import pygpukit_torch
from _common import geomean, markdown_table, rotation_count, run_header, time_interleaved
from pygpukit_torch._env import environment_variable
from pygpukit_torch.testing import cublas_tf32, rel_error

TARGET_SET = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384), (8192, 14336, 4096),
              (8192, 4096, 14336))


def stream_k_off():
    return environment_variable("PYGPUKIT_STREAM_K", "0", caller="bench_stream_k")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", help="comma-separated MxNxK (a @ b, both row-major); default: the target set")
    parser.add_argument("--min-run-time", type=float, default=0.4, help="seconds per variant and shape")
    args = parser.parse_args()
    shapes = ([tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")] if args.shapes
              else TARGET_SET)
    print(run_header())
    ours = lambda a, b: pygpukit_torch.matmul_tf32(a, b)
    variants = {"stream-K": (ours, contextlib.nullcontext), "off": (ours, stream_k_off),
                "cuBLAS": (lambda a, b: torch.matmul(a, b), lambda: cublas_tf32(True))}
    rows, vs_on, vs_off = [], [], []
    for m, n, k in shapes:
        count = rotation_count(4 * (m * k + k * n))
        sets = [(torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")) for _ in range(count)]
        t = time_interleaved(variants, sets, "stream-K", f"{m}x{n}x{k}", args.min_run_time)
        on, off, cublas = (t[v].median * 1e6 for v in ("stream-K", "off", "cuBLAS"))
        a, b = sets[0]
        ref = a.double() @ b.double()
        err_on = rel_error(pygpukit_torch.matmul_tf32(a, b), ref)
        with stream_k_off():
            err_off = rel_error(pygpukit_torch.matmul_tf32(a, b), ref)
        vs_on.append(cublas / on)
        vs_off.append(cublas / off)
        rows.append([f"{m}x{n}x{k}", f"{on:.1f}", f"{off:.1f}", f"{cublas:.1f}", f"{off / on:.3f}",
                     f"{cublas / on:.3f}", f"{cublas / off:.3f}", f"{err_on:.2e}", f"{err_off:.2e}",
                     pygpukit_torch.kernel_info(a, b)])
        del sets, ref
    print("\n".join(markdown_table(["shape (nn)", "stream-K us", "off us", "cuBLAS us", "off / stream-K",
                                    "cuBLAS / stream-K", "cuBLAS / off", "rel. err", "rel. err off", "kernel"],
                                   rows)))
    print(f"\ngeometric mean of cuBLAS time / ours: {geomean(vs_on):.3f} as chosen, {geomean(vs_off):.3f} off")


if __name__ == "__main__":
    main()
