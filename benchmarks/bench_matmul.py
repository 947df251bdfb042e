"""Throughput of pygpukit matmul_tf32 against torch.matmul (cuBLAS) in FP32 and
TF32, measured in the same run.

Timing: torch.utils.benchmark.Timer.blocked_autorange (median of CUDA-synced
blocks after warm-up); each call takes the next of several input sets whose
total size exceeds the L2 cache, so small shapes are not timed out of L2.
TFLOP/s = 2·M·N·K / median time. Accuracy: ‖out − ref‖/‖ref‖ against the
float64 product of the same inputs.

    python benchmarks/bench_matmul.py [--quick] [--markdown OUT.md]
"""

import argparse
import contextlib
import os

import torch
import torch.utils.benchmark as benchmark

import pygpukit_torch
from _common import append_markdown, markdown_table, rotation_count, run_header, time_rotating
from pygpukit_torch.testing import cublas_tf32, rel_error

SHAPES = (
    [("square", n, n, n, "nn") for n in (1024, 2048, 4096, 8192)]
    + [("llm", 8192, 4096, 4096, "nn"), ("llm", 8192, 14336, 4096, "nn"), ("llm", 8192, 4096, 14336, "nn")]
    + [("odd", 4095, 4097, 4099, "nn")]
    + [("decode", m, 4096, 4096, "nn") for m in (1, 16, 128)]
    + [("layout", 4096, 4096, 4096, lay) for lay in ("nt", "tn", "tt")]
)
QUICK = [s for s in SHAPES if s[1] in (1, 128, 4096) or s[0] == "odd"]


def make_inputs(m, n, k, layout, count):
    def one(rows, cols, transposed):
        return torch.randn(cols, rows, device="cuda").t() if transposed else torch.randn(rows, cols, device="cuda")
    return [(one(m, k, layout[0] == "t"), one(k, n, layout[1] == "t")) for _ in range(count)]


def forced(kernel):
    """matmul_tf32 with the dispatcher overridden (PYGPUKIT_KERNEL is read per call)."""
    def fn(a, b):
        os.environ["PYGPUKIT_KERNEL"] = kernel
        try:
            return pygpukit_torch.matmul_tf32(a, b)
        finally:
            os.environ.pop("PYGPUKIT_KERNEL")
    return fn


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a subset of the shapes")
    parser.add_argument("--markdown", help="append the results table to this file")
    parser.add_argument("--kernels", default="auto",
                        help="comma-separated PYGPUKIT_KERNEL values to time side by side, e.g. "
                             "auto,mma_sync_medium")
    args = parser.parse_args()

    header = run_header()
    print(header)
    variants = {
        "pygpukit tf32": (lambda a, b: pygpukit_torch.matmul_tf32(a, b), None),
        "cuBLAS tf32": (torch.matmul, True),
        "cuBLAS fp32": (torch.matmul, False),
    }
    extra = [k for k in args.kernels.split(",") if k != "auto"]
    for kernel in extra:
        variants[f"pygpukit {kernel}"] = (forced(kernel), None)
    results, rows = [], []
    for kind, m, n, k, layout in (QUICK if args.quick else SHAPES):
        sets = make_inputs(m, n, k, layout, rotation_count(4 * (m * k + k * n)))
        a0, b0 = sets[0]
        ref = torch.matmul(a0.double(), b0.double())
        sub = f"{kind} {m}x{n}x{k} {layout}"
        row = {"shape": sub}
        for name, (fn, tf32) in variants.items():
            with cublas_tf32(bool(tf32)) if tf32 is not None else contextlib.nullcontext():
                err = rel_error(fn(a0, b0), ref)
                r = time_rotating(fn, sets, "matmul TFLOP/s", sub, name)
            results.append(r)
            row[name] = (2 * m * n * k / r.median / 1e12, err, r.median * 1e6)
        info = pygpukit_torch.kernel_info(a0, b0)
        rows.append((row, info))
        ours, tf, fp = row["pygpukit tf32"], row["cuBLAS tf32"], row["cuBLAS fp32"]
        print(f"{sub:32s} ours {ours[0]:7.1f} TFLOP/s ({ours[2]:8.1f} us, err {ours[1]:.2e})  "
              f"cuBLAS tf32 {tf[0]:7.1f} (err {tf[1]:.2e})  fp32 {fp[0]:6.1f}  "
              f"ratio vs tf32 {ours[0] / tf[0]:.2f}  [{info}]"
              + "".join(f"  {k} {row[f'pygpukit {k}'][0]:.1f}" for k in extra), flush=True)
        del sets, ref

    benchmark.Compare(results).print()
    columns = ["shape (M×N×K, layout)", "pygpukit TF32 TFLOP/s", "cuBLAS TF32", "cuBLAS FP32", "ours / cuBLAS TF32",
               "ours / cuBLAS FP32", "rel. err ours", "rel. err cuBLAS TF32", "kernel"]
    cells = []
    for row, info in rows:
        o, t, f = row["pygpukit tf32"], row["cuBLAS tf32"], row["cuBLAS fp32"]
        cells.append([row["shape"], f"{o[0]:.1f}", f"{t[0]:.1f}", f"{f[0]:.1f}", f"{o[0] / t[0]:.2f}",
                      f"{o[0] / f[0]:.2f}", f"{o[1]:.2e}", f"{t[1]:.2e}", info])
    lines = [f"### {header}", ""] + markdown_table(columns, cells)
    table = "\n".join(lines) + "\n"
    print(table)
    append_markdown(args.markdown, table)


if __name__ == "__main__":
    main()
