"""Decode-sized matmuls with the weight in both layouts a model may keep it:
`x @ W` with W stored [in, out] (row-major B, GPT-2's Conv1D) and
`x @ Wt.T` with Wt stored [out, in] (column-major B, nn.Linear / F.linear),
the same values in both, for pygpukit and torch.matmul (cuBLAS TF32),
interleaved (_common.time_interleaved) over input sets larger than L2.

Prints a Markdown table: microseconds per call (host time included), the
ratio cuBLAS / ours for each weight layout, the weight bytes per second
that ours reaches with the row-major weight, relative error, and the kernel.

    python benchmarks/bench_decode.py [--min-run-time 0.3] [--single-row-batches]

--single-row-batches shapes x as [M, 1, K]: M batches of one row each, as
torch.matmul sees a decode step's M tokens of shape [batch, 1, hidden].
"""

import argparse
import contextlib

import torch

import pygpukit_torch
from _common import DECODE_WEIGHTS, markdown_table, rotation_count, run_header, time_interleaved
from pygpukit_torch.testing import cublas_tf32, rel_error

ROWS = (1, 16, 64, 128)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--min-run-time", type=float, default=0.3, help="seconds per variant and shape")
    parser.add_argument("--single-row-batches", action="store_true", help="x as [M, 1, K] instead of [M, K]")
    args = parser.parse_args()
    print(run_header())
    ours = (lambda x, w: pygpukit_torch.matmul_tf32(x, w), contextlib.nullcontext)
    cublas = (lambda x, w: torch.matmul(x, w), lambda: cublas_tf32(True))
    rows = []
    for m in ROWS:
        for n, k in DECODE_WEIGHTS:
            count = rotation_count(4 * (m * k + k * n))
            x_shape = (m, 1, k) if args.single_row_batches else (m, k)
            row_major = [(torch.randn(x_shape, device="cuda"), torch.randn(k, n, device="cuda")) for _ in range(count)]
            col_major = [(x, w.t().contiguous().t()) for x, w in row_major]
            label = f"{m}x{n}x{k}"
            nn = time_interleaved({"ours": ours, "cublas": cublas}, row_major, "x @ W", label, args.min_run_time)
            nt = time_interleaved({"ours": ours, "cublas": cublas}, col_major, "x @ Wt.T", label, args.min_run_time)
            us = {key: t.median * 1e6 for key, t in (("ours nn", nn["ours"]), ("cublas nn", nn["cublas"]),
                                                    ("ours nt", nt["ours"]), ("cublas nt", nt["cublas"]))}
            x, w = row_major[0]
            err = rel_error(pygpukit_torch.matmul_tf32(x, w), x.double() @ w.double())
            rows.append([m, n, k, f"{us['ours nn']:.1f}", f"{us['ours nt']:.1f}", f"{us['cublas nn']:.1f}",
                         f"{us['cublas nt']:.1f}", f"{us['cublas nn'] / us['ours nn']:.2f}",
                         f"{us['cublas nt'] / us['ours nt']:.2f}", f"{4 * k * n / us['ours nn'] / 1e3:.0f}", f"{err:.2e}", pygpukit_torch.kernel_info(x, w)])
    columns = ["M", "N", "K", "ours x @ W (us)", "ours x @ Wt.T (us)", "cuBLAS x @ W (us)", "cuBLAS x @ Wt.T (us)",
               "cuBLAS / ours (x @ W)", "cuBLAS / ours (x @ Wt.T)", "W GB/s (ours, x @ W)", "rel. err (x @ W)", "kernel (x @ W)"]
    print("\n".join(markdown_table(columns, rows)))


if __name__ == "__main__":
    main()
