"""Throughput of pygpukit matmul_tf32 against torch.matmul (cuBLAS) in FP32 and
TF32, measured in the same run.

Timing: torch.utils.benchmark (median of CUDA-synced blocks after warm-up),
the variants of a shape taking turns block by block (_common.time_interleaved)
so that clock drift hits them alike; each call takes the next of several
input sets whose total size exceeds the L2 cache, so small shapes are not
timed out of L2.
TFLOP/s = 2·M·N·K / median time. Accuracy: ‖out − ref‖/‖ref‖ against the
float64 product of the same inputs.

    python benchmarks/bench_matmul.py [--quick | --target] [--markdown OUT.md] [--json OUT.json]
        [--kernels auto,mma_sync] [--tf32x3] [--ieee] [--min-run-time SECONDS]

--target runs only the headline set (TARGET_SET). A run that includes the
whole set (the default, or --target) ends with the geometric mean of the
ratios to cuBLAS TF32 over it.
"""

import argparse
import contextlib
import json

import torch
import torch.utils.benchmark as benchmark

import pygpukit_torch
from _common import (DECODE_WEIGHTS, append_markdown, geomean, markdown_table, rotation_count, run_header,
                     time_interleaved)
from pygpukit_torch.testing import cublas_tf32, rel_error

# The canonical shape set: (kind, M, N, K, layout). Layout letters are A then
# B: "n" row-major, "t" a transposed view (column-major); "nt" is
# F.linear's x @ weight.T, the decode shapes' layout.
SHAPES = (
    [("square", n, n, n, "nn") for n in (1024, 2048, 4096, 8192, 16384)]
    + [("llm", 8192, 4096, 4096, "nn"), ("llm", 8192, 14336, 4096, "nn"), ("llm", 8192, 4096, 14336, "nn")]
    + [("odd", 4095, 4097, 4099, "nn"), ("odd linear", 4097, 4099, 4095, "nt")]
    # Rows 16-byte aligned but off the 32-byte sectors (in_features = 4100),
    # which the 128 x 128 tiles pack first (docs: "Rows off the sectors").
    + [("odd", 4097, 4099, 4100, "nt")]
    + [("decode", m, n, k, "nt") for m in (1, 16) for n, k in DECODE_WEIGHTS]
    + [("decode", 128, 4096, 4096, "nt")]
    # x @ W with the weight stored [in, out] (GPT-2's Conv1D): B row-major.
    + [("decode", m, 4096, 4096, "nn") for m in (1, 16, 128)]
    + [("layout", 8192, 8192, 8192, lay) for lay in ("nt", "tn", "tt")]
)
QUICK = [s for s in SHAPES if s[1:4] in ((4096, 4096, 4096), (8192, 8192, 8192), (1, 4096, 4096), (128, 4096, 4096))
         or s[0] == "odd"]
# The headline set: geometric mean of the ratio to cuBLAS TF32.
TARGET_SET = [("square", 4096, 4096, 4096, "nn"), ("square", 8192, 8192, 8192, "nn"),
              ("square", 16384, 16384, 16384, "nn"), ("llm", 8192, 14336, 4096, "nn"),
              ("llm", 8192, 4096, 14336, "nn")]


def make_inputs(m, n, k, layout, count):
    def one(rows, cols, transposed):
        return torch.randn(cols, rows, device="cuda").t() if transposed else torch.randn(rows, cols, device="cuda")
    return [(one(m, k, layout[0] == "t"), one(k, n, layout[1] == "t")) for _ in range(count)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    subset = parser.add_mutually_exclusive_group()
    subset.add_argument("--quick", action="store_true", help="a subset of the shapes")
    subset.add_argument("--target", action="store_true",
                        help="only the target set (4096³, 8192³, 16384³, 8192×14336×4096, 8192×4096×14336)")
    parser.add_argument("--markdown", help="append the results table to this file")
    parser.add_argument("--kernels", default="auto,mma_sync",
                        help="comma-separated kernels (pygpukit_torch.dispatch.KERNELS) to time side by "
                             "side with the automatic choice, e.g. auto,mma_sync,mma_sync_medium")
    parser.add_argument("--tf32x3", action="store_true",
                        help="also time precision='tf32x3' (3xTF32), reported against cuBLAS FP32")
    parser.add_argument("--ieee", action="store_true",
                        help="also time precision='ieee' (the FP32 kernels: FMA kernel, GEMVs), reported "
                             "against cuBLAS FP32")
    parser.add_argument("--json", help="write the measurements here (for benchmarks/plot_results.py)")
    parser.add_argument("--min-run-time", type=float, default=0.5,
                        help="seconds of timing per variant (and shape), in 5 turns")
    args = parser.parse_args()

    header = run_header()
    print(header)
    # name -> (fn, context around its timing): a forced kernel's block is
    # entered once around its turns, not per call (it costs host time).
    variants = {
        "pygpukit tf32": (lambda a, b: pygpukit_torch.matmul_tf32(a, b), contextlib.nullcontext),
        "cuBLAS tf32": (torch.matmul, lambda: cublas_tf32(True)),
        "cuBLAS fp32": (torch.matmul, lambda: cublas_tf32(False)),
    }
    # Precisions other than TF32, each reported against cuBLAS FP32.
    fp32_class = [p for p in ("tf32x3", "ieee") if getattr(args, p)]
    for precision in fp32_class:
        variants[f"pygpukit {precision}"] = (
            lambda a, b, precision=precision: pygpukit_torch.matmul_tf32(a, b, precision=precision),
            contextlib.nullcontext)
    extra = [k for k in args.kernels.split(",") if k != "auto"]
    for kernel in extra:
        variants[f"pygpukit {kernel}"] = (pygpukit_torch.matmul_tf32,
                                          lambda kernel=kernel: pygpukit_torch.force_kernel(kernel))
    results, rows = [], []
    shapes = QUICK if args.quick else TARGET_SET if args.target else SHAPES
    for i, (kind, m, n, k, layout) in enumerate(shapes):
        print(f"[{i + 1}/{len(shapes)}] " + "#" * (i + 1) + "." * (len(shapes) - i - 1), flush=True)
        sets = make_inputs(m, n, k, layout, rotation_count(4 * (m * k + k * n)))
        a0, b0 = sets[0]
        ref = torch.matmul(a0.double(), b0.double())
        sub = f"{kind} {m}x{n}x{k} {layout}"
        row = {"shape": sub}
        measured = time_interleaved(variants, sets, "matmul TFLOP/s", sub, len(variants) * args.min_run_time)
        for name, (fn, context) in variants.items():
            with context():
                err = rel_error(fn(a0, b0), ref)
            r = measured[name]
            results.append(r)
            row[name] = (2 * m * n * k / r.median / 1e12, err, r.median * 1e6)
        info = pygpukit_torch.kernel_info(a0, b0)
        # The FP32-class precisions may run other kernels (the FMA kernel,
        # the GEMVs, the 3xTF32 kernels): named in their own columns.
        row["kernels"] = {p: pygpukit_torch.kernel_info(a0, b0, precision=p) for p in fp32_class}
        rows.append((row, info))
        row["key"] = (kind, m, n, k, layout)
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
    if fp32_class:
        columns.append("rel. err cuBLAS FP32")
        for cell, (row, _) in zip(cells, rows):
            cell.append(f"{row['cuBLAS fp32'][1]:.2e}")
    for precision in fp32_class:
        columns += [f"pygpukit {precision} TFLOP/s", f"{precision} / cuBLAS FP32", f"rel. err {precision}",
                    f"kernel {precision}"]
        for cell, (row, _) in zip(cells, rows):
            ours, f = row[f"pygpukit {precision}"], row["cuBLAS fp32"]
            cell += [f"{ours[0]:.1f}", f"{ours[0] / f[0]:.2f}", f"{ours[1]:.2e}", row["kernels"][precision]]
    for k in extra:
        columns.append(f"pygpukit {k} TFLOP/s")
        for cell, (row, _) in zip(cells, rows):
            cell.append(f"{row[f'pygpukit {k}'][0]:.1f}")
    lines = [f"### {header}", ""] + markdown_table(columns, cells)
    by_key = {row["key"]: row for row, _ in rows}
    if all(key in by_key for key in TARGET_SET):
        lines.append("")
        for name in ["pygpukit tf32"] + [f"pygpukit {k}" for k in extra]:
            g = geomean([by_key[key][name][0] / by_key[key]["cuBLAS tf32"][0] for key in TARGET_SET])
            lines.append(f"Geometric mean of {name} / cuBLAS TF32 over 4096³, 8192³, 16384³, "
                         f"8192×14336×4096, 8192×4096×14336: **{g:.3f}**")
    table = "\n".join(lines) + "\n"
    print(table)
    append_markdown(args.markdown, table)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"header": header, "rows": [
                {"kind": r["key"][0], "M": r["key"][1], "N": r["key"][2], "K": r["key"][3], "layout": r["key"][4],
                 "kernel": info, **{f"kernel {p}": r["kernels"][p] for p in fp32_class},
                 **{name: r[name][0] for name in variants}} for r, info in rows]}, fh, indent=1)


if __name__ == "__main__":
    main()
