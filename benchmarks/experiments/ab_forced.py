"""One build's rate on forced kernels against cuBLAS TF32 in the same
process, for comparing two builds of pygpukit (ab_builds.sh, next to it, runs
this in each build, alternately). One line per case:

    TAG MxNxK LAYOUT KERNEL: ours X TFLOP/s cublas Y ratio Z

    python benchmarks/experiments/ab_forced.py TAG [--case 4096x4096x4096:nt:mma_sync ...] [--min-run-time 0.4]

Layout letters are A then B: "n" row-major, "t" a transposed view (so "nt"
is F.linear's x @ W.T). KERNEL is a pygpukit_torch.force_kernel name.
Inputs rotate past L2 and the two variants take turns
(_common.time_interleaved); ratio = cuBLAS time / ours.
"""

import argparse
import contextlib

import _path  # noqa: F401  (the repository root on sys.path: benchmarks._common)

import torch

import pygpukit_torch

from benchmarks._common import rotation_count, run_header, time_interleaved
from benchmarks.bench_matmul import make_inputs

DEFAULT_CASES = [f"4096x4096x4096:{layout}:mma_sync" for layout in ("nn", "nt", "tn", "tt")]


def parse_case(text):
    shape, layout, kernel = text.split(":")
    m, n, k = (int(v) for v in shape.split("x"))
    if len(layout) != 2 or set(layout) - {"n", "t"}:
        raise argparse.ArgumentTypeError(f"layout must be two of n/t, got {layout!r}")
    return m, n, k, layout, kernel


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tag", help="printed first on every line (e.g. base1, new1)")
    parser.add_argument("--case", action="append", type=parse_case,
                        help="MxNxK:LAYOUT:KERNEL, repeatable (default: 4096^3 mma_sync, all layouts)")
    parser.add_argument("--min-run-time", type=float, default=0.4, help="seconds per variant and case")
    args = parser.parse_args()
    run_header()  # exits without a GPU
    torch.backends.cuda.matmul.allow_tf32 = True
    for m, n, k, layout, kernel in args.case or [parse_case(c) for c in DEFAULT_CASES]:
        sets = make_inputs(m, n, k, layout, rotation_count(4 * (m * k + k * n)))
        variants = {"cublas": (torch.matmul, contextlib.nullcontext),
                    "ours": (pygpukit_torch.matmul_tf32, lambda kernel=kernel: pygpukit_torch.force_kernel(kernel))}
        times = {name: measurement.median for name, measurement in
                 time_interleaved(variants, sets, "ab", f"{m}x{n}x{k} {layout}", args.min_run_time, rounds=3).items()}
        flop = 2 * m * n * k
        print(f"{args.tag} {m}x{n}x{k} {layout} {kernel}: ours {flop / times['ours'] / 1e12:.1f} TFLOP/s "
              f"cublas {flop / times['cublas'] / 1e12:.1f} ratio {times['cublas'] / times['ours']:.3f}", flush=True)


if __name__ == "__main__":
    main()
