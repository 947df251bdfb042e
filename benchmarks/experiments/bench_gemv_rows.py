"""The FP32 GEMVs for 2 to 16 rows of x, on both weight layouts: `x @ W`
with W stored [in, out] (row-major, gemv_rowmajor.cu; also 17 to 64 rows
there, in blocks of 16) and `x @ Wt.T` with Wt stored [out, in]
(nn.Linear's, gemv_kmajor_rows.cu), forced
(PYGPUKIT_KERNEL=gemv), against what the automatic choice serves (which is
the GEMV where dispatch.cu's few_rows_gemv_max_m takes it), against the
tensor-core kernel forced ("tc": for x @ W the wgmma path, SwapAB for TF32
and the staged operands on the promoted tile for 3xTF32; for x @ Wt.T the
skinny kernel), the FMA kernel for precision="ieee", and cuBLAS (TF32, and
FP32 for 3xTF32), interleaved (_common.time_interleaved) over input sets larger
than L2. The GEMVs compute in FP32 for every precision.

Prints a Markdown table: microseconds per call (host time included), the
ratios to the GEMV, the weight's bytes per second for the GEMV, its
relative error and the kernels the automatic choice names.

    python benchmarks/experiments/bench_gemv_rows.py [--rows 2,4,8,16,32,48] [--min-run-time 0.3]
"""

import argparse
import contextlib

import _path  # noqa: F401  (the repository root on sys.path: benchmarks._common)

import torch

import pygpukit_torch
from pygpukit_torch.testing import cublas_tf32, rel_error

from benchmarks._common import (DECODE_WEIGHTS, header_line, markdown_table, rotation_count, run_header,
                                time_interleaved)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="2,4,8,16",
                        help="comma-separated M values: 2 to 16, and 17 to 64 for x @ W (blocks of 16)")
    parser.add_argument("--min-run-time", type=float, default=0.3, help="seconds per variant and shape")
    args = parser.parse_args()
    print(header_line(run_header()))
    mm = pygpukit_torch.matmul_tf32
    force = pygpukit_torch.force_kernel
    tf32, tf32x3, ieee = ((lambda x, w, p=p: mm(x, w, precision=p)) for p in ("tf32", "tf32x3", "ieee"))

    def variants(tc):
        return {
            "gemv": (tf32, lambda: force("gemv")),
            "auto tf32": (tf32, contextlib.nullcontext),
            "auto tf32x3": (tf32x3, contextlib.nullcontext),
            "tc tf32": (tf32, lambda: force(tc)),
            "tc tf32x3": (tf32x3, lambda: force(tc)),
            "fma ieee": (ieee, lambda: force("fma")),
            "cublas tf32": (lambda x, w: torch.matmul(x, w), lambda: cublas_tf32(True)),
            "cublas fp32": (lambda x, w: torch.matmul(x, w), lambda: cublas_tf32(False)),
        }
    names = list(variants("skinny"))
    rows = []
    for m in (int(v) for v in args.rows.split(",")):
        for n, k in DECODE_WEIGHTS:
            row_major = [(torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda"))
                         for _ in range(rotation_count(4 * (m * k + k * n)))]
            layouts = {"x @ W": (row_major, "wgmma")}
            if m <= 16:  # the K-major GEMV computes up to 16 rows
                layouts["x @ Wt.T"] = ([(x, w.t().contiguous().t()) for x, w in row_major], "skinny")
            for layout, (sets, tc) in layouts.items():
                t = time_interleaved(variants(tc), sets, layout, f"{m}x{n}x{k}", args.min_run_time)
                us = {name: t[name].median * 1e6 for name in names}
                x, w = sets[0]
                with force("gemv"):
                    err = rel_error(mm(x, w), x.double() @ w.double())
                chosen = " / ".join(pygpukit_torch.kernel_info(x, w, precision=p).split(",")[0]
                                    for p in ("tf32", "tf32x3", "ieee"))
                rows.append([layout, m, n, k] + [f"{us[name]:.1f}" for name in names] +
                            [f"{us[name] / us['gemv']:.2f}" for name in names[3:]] +
                            [f"{4 * k * n / us['gemv'] / 1e3:.0f}", f"{err:.2e}", chosen])
            del layouts, row_major
    columns = (["layout", "M", "N", "K"] + [f"{name} (us)" for name in names] +
               [f"{name} / gemv" for name in names[3:]] +
               ["W GB/s (gemv)", "rel. err (gemv)", "auto tf32 / tf32x3 / ieee"])
    print("\n".join(markdown_table(columns, rows)))


if __name__ == "__main__":
    main()
