"""3xTF32 (precision="tf32x3") at decode-sized M on both weight layouts:
`x @ W` with W stored [in, out] (row-major B) and `x @ Wt.T` with Wt stored
[out, in] (nn.Linear's), for what the automatic choice runs, the kernels it
chooses between forced (the row-blocked FP32 GEMV for x @ W, the skinny
kernel's row blocks with the split in registers for x @ Wt.T, and the wgmma
path: up to 128 rows the kernel that splits W in registers and packs x's
parts, above that both operands packed as big and small parts per call),
against cuBLAS FP32 (the accuracy 3xTF32 matches) and TF32, interleaved
(_common.time_interleaved) over input sets larger than L2. A forced kernel
that cannot run a shape falls back to the automatic choice (the blocks
above 64 rows; the wgmma path off Hopper), so there its column repeats
"auto".

Prints a Markdown table: microseconds per call (host time included), the
ratio cuBLAS FP32 / auto, the relative error of the automatic choice and of
cuBLAS FP32 against float64, and the kernel the automatic choice names.

    python benchmarks/experiments/bench_tf32x3_decode.py [--rows 16,32,48,64,128] [--min-run-time 0.3]
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
    parser.add_argument("--rows", default="16,32,48,64,128", help="comma-separated M values")
    parser.add_argument("--min-run-time", type=float, default=0.3, help="seconds per variant and shape")
    args = parser.parse_args()
    print(header_line(run_header()))

    def ours(kernel):
        force = contextlib.nullcontext if kernel is None else (lambda: pygpukit_torch.force_kernel(kernel))
        return (lambda x, w: pygpukit_torch.matmul_tf32(x, w, precision="tf32x3"), force)

    cublas = {"cublas fp32": (torch.matmul, lambda: cublas_tf32(False)),
              "cublas tf32": (torch.matmul, lambda: cublas_tf32(True))}
    layouts = {"x @ W": "gemv", "x @ Wt.T": "skinny"}
    names = ["auto", "blocks", "wgmma"] + list(cublas)
    rows = []
    for m in (int(v) for v in args.rows.split(",")):
        for n, k in DECODE_WEIGHTS:
            row_major = [(torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda"))
                         for _ in range(rotation_count(4 * (m * k + k * n)))]
            for layout, blocks in layouts.items():
                sets = row_major if layout == "x @ W" else [(x, w.t().contiguous().t()) for x, w in row_major]
                variants = {"auto": ours(None), "blocks": ours(blocks), "wgmma": ours("wgmma"), **cublas}
                t = time_interleaved(variants, sets, layout, f"{m}x{n}x{k}", args.min_run_time)
                us = {name: t[name].median * 1e6 for name in names}
                x, w = sets[0]
                ref = x.double() @ w.double()
                err = rel_error(pygpukit_torch.matmul_tf32(x, w, precision="tf32x3"), ref)
                with cublas_tf32(False):
                    err_fp32 = rel_error(torch.matmul(x, w), ref)
                rows.append([layout, m, n, k] + [f"{us[name]:.1f}" for name in names] +
                            [f"{us['cublas fp32'] / us['auto']:.2f}", f"{err:.2e}", f"{err_fp32:.2e}",
                             pygpukit_torch.kernel_info(x, w, precision="tf32x3")])
                del sets
            del row_major
    columns = (["layout", "M", "N", "K"] + [f"{name} (us)" for name in names] +
               ["cublas fp32 / auto", "rel. err auto", "rel. err cublas fp32", "kernel (auto)"])
    print("\n".join(markdown_table(columns, rows)))


if __name__ == "__main__":
    main()
