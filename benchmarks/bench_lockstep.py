"""What the Hopper path's lockstep gains (csrc/cuda/wgmma_schedule.cuh,
lockstep_plan): products of many waves as the dispatcher runs them (the
producers in lockstep every kLockstepChunk k-tiles; the kernel's name
says so), with other chunk lengths, with it off
(PYGPUKIT_LOCKSTEP=0), and cuBLAS (FP32 for precision "tf32x3", TF32 for
"tf32"), interleaved (_common.time_interleaved) over input sets larger
than L2.

Prints a Markdown table: microseconds per call, TFLOP/s, each variant's
time against lockstep off, cuBLAS's time against the default's, whether
the outputs of all variants are bitwise equal, and the kernel.

    python benchmarks/bench_lockstep.py [--shapes 16384x16384x16384,...] [--chunks 16,64]
        [--precision tf32x3] [--min-run-time 1.0]
"""

import argparse
import contextlib

import torch

import pygpukit_torch
from _common import environment, markdown_table, rotation_count, run_header, time_interleaved
from pygpukit_torch.testing import cublas_tf32

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", help="comma-separated MxNxK (a @ b, both row-major); default: 4096^3, 8192^3, 16384^3")
    parser.add_argument("--chunks", default="", help="comma-separated chunk lengths in k-tiles besides the default")
    parser.add_argument("--precision", default="tf32x3", choices=("tf32", "tf32x3"))
    parser.add_argument("--min-run-time", type=float, default=1.0, help="seconds per variant and shape")
    args = parser.parse_args()
    shapes = ([tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES)
    print(run_header(), f"· precision {args.precision}")
    ours = lambda a, b: pygpukit_torch.matmul_tf32(a, b, precision=args.precision)
    variants = {"default": (ours, contextlib.nullcontext)}
    for chunk in filter(None, args.chunks.split(",")):
        variants[f"chunk {chunk}"] = (ours, lambda chunk=chunk: environment("PYGPUKIT_LOCKSTEP", chunk))
    variants["off"] = (ours, lambda: environment("PYGPUKIT_LOCKSTEP", "0"))
    variants["cuBLAS"] = (lambda a, b: torch.matmul(a, b), lambda: cublas_tf32(args.precision == "tf32"))
    rows = []
    for m, n, k in shapes:
        count = rotation_count(4 * (m * k + k * n))
        sets = [(torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")) for _ in range(count)]
        t = time_interleaved(variants, sets, "lockstep", f"{m}x{n}x{k}", args.min_run_time)
        us = {name: t[name].median * 1e6 for name in variants}
        a, b = sets[0]
        outs = []
        for name, (fn, context) in variants.items():
            if name != "cuBLAS":
                with context():
                    outs.append(fn(a, b))
        same = all(torch.equal(o, outs[0]) for o in outs[1:])
        cells = [f"{m}x{n}x{k}"]
        for name in variants:
            cells += [f"{us[name]:.0f}", f"{2 * m * n * k / us[name] / 1e6:.1f}"]
        cells += [f"{us['off'] / us[name]:.3f}" for name in variants if name not in ("off", "cuBLAS")]
        cells += [f"{us['cuBLAS'] / us['default']:.3f}", str(same)]
        cells.append(pygpukit_torch.kernel_info(a, b, precision=args.precision))
        rows.append(cells)
        del sets, outs
    columns = ["shape (nn)"]
    for name in variants:
        columns += [f"{name} us", f"{name} TFLOP/s"]
    columns += [f"off / {name}" for name in variants if name not in ("off", "cuBLAS")]
    columns += ["cuBLAS / default", "bitwise equal", "kernel (default)"]
    print("\n".join(markdown_table(columns, rows)))


if __name__ == "__main__":
    main()
