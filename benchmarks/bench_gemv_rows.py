"""Whether the FP32 GEMVs should serve 2 to 16 rows of x in the automatic
choice, on both weight layouts: `x @ W` with W stored [in, out] (row-major,
gemv_rowmajor.cu) and `x @ Wt.T` with Wt stored [out, in] (nn.Linear's,
gemv_rows.cu). Each against what serves those rows now (the automatic
choice, TF32 and 3xTF32) and cuBLAS (TF32, and FP32 for 3xTF32),
interleaved (_common.time_interleaved) over input sets larger than L2. The
GEMVs run forced (PYGPUKIT_KERNEL=gemv) and compute in FP32 for every
precision.

Prints a Markdown table: microseconds per call (host time included), the
ratios, the weight's bytes per second for the GEMV and its relative error.

    python benchmarks/bench_gemv_rows.py [--rows 2,4,8,16] [--min-run-time 0.3]
"""

import argparse
import contextlib

import torch

import pygpukit_torch
from _common import markdown_table, rotation_count, run_header, time_interleaved
from pygpukit_torch.testing import cublas_tf32, rel_error

WEIGHTS = ((4096, 4096), (14336, 4096), (4096, 14336))  # (N, K)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="2,4,8,16", help="comma-separated M values (2 to 16)")
    parser.add_argument("--min-run-time", type=float, default=0.3, help="seconds per variant and shape")
    args = parser.parse_args()
    print(run_header())
    mm = pygpukit_torch.matmul_tf32
    variants = {
        "auto tf32": (lambda x, w: mm(x, w), contextlib.nullcontext),
        "gemv": (lambda x, w: mm(x, w), lambda: pygpukit_torch.force_kernel("gemv")),
        "auto tf32x3": (lambda x, w: mm(x, w, precision="tf32x3"), contextlib.nullcontext),
        "cublas tf32": (lambda x, w: torch.matmul(x, w), lambda: cublas_tf32(True)),
        "cublas fp32": (lambda x, w: torch.matmul(x, w), lambda: cublas_tf32(False)),
    }
    rows = []
    for m in (int(v) for v in args.rows.split(",")):
        for n, k in WEIGHTS:
            row_major = [(torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda"))
                         for _ in range(rotation_count(4 * (m * k + k * n)))]
            layouts = {"x @ W": row_major, "x @ Wt.T": [(x, w.t().contiguous().t()) for x, w in row_major]}
            for layout, sets in layouts.items():
                t = time_interleaved(variants, sets, layout, f"{m}x{n}x{k}", args.min_run_time)
                us = {name: t[name].median * 1e6 for name in variants}
                x, w = sets[0]
                with pygpukit_torch.force_kernel("gemv"):
                    info = pygpukit_torch.kernel_info(x, w)
                    err = rel_error(mm(x, w), x.double() @ w.double())
                rows.append([layout, m, n, k] + [f"{us[name]:.1f}" for name in variants] +
                            [f"{us['auto tf32'] / us['gemv']:.2f}", f"{us['cublas tf32'] / us['gemv']:.2f}",
                             f"{us['auto tf32x3'] / us['gemv']:.2f}", f"{us['cublas fp32'] / us['gemv']:.2f}",
                             f"{4 * k * n / us['gemv'] / 1e3:.0f}", f"{err:.2e}", info])
            del layouts, row_major
    columns = ["layout", "M", "N", "K"] + [f"{name} (us)" for name in variants] + [
        "auto tf32 / gemv", "cuBLAS TF32 / gemv", "auto tf32x3 / gemv", "cuBLAS FP32 / gemv",
        "W GB/s (gemv)", "rel. err (gemv)", "gemv kernel"]
    print("\n".join(markdown_table(columns, rows)))


if __name__ == "__main__":
    main()
