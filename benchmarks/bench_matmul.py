"""matmul: throughput of pygpukit matmul_tf32 against torch.matmul (cuBLAS) in
FP32 and TF32, measured in the same run.

Timing: torch.utils.benchmark (median of CUDA-synced blocks after warm-up),
the variants of a shape taking turns block by block (_common.time_interleaved)
so that clock drift hits them alike; each call takes the next of several
input sets whose total size exceeds the L2 cache, so small shapes are not
timed out of L2.
TFLOP/s = 2·M·N·K / median time. Accuracy: ‖out − ref‖/‖ref‖ against the
float64 product of the same inputs.

    python -m benchmarks matmul [--quick | --target] [--tf32x3] [--fp32] [--ieee] [--kernels auto,mma_sync]
        [--min-run-time SECONDS] [--markdown OUT.md] [--save [FILE]] [--json FILE]

--target runs only the headline set (report.TARGET_SET). A run that includes
the whole set (the default, or --target) ends with the geometric mean of the
ratios to cuBLAS TF32 over it.
"""

import contextlib
import json

import torch
import torch.utils.benchmark as benchmark

import pygpukit_torch
from pygpukit_torch.testing import cublas_tf32, rel_error

from ._common import (DECODE_WEIGHTS, add_common_arguments, pick_device, publish, rotation_count, run_header,
                      time_interleaved)
from .report import TARGET_SET

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
# --quick without a GPU: tiny sizes that run the tool, not the kernels.
CPU_QUICK = [("square", 64, 64, 64, "nn"), ("odd", 33, 65, 47, "nt"), ("decode", 1, 64, 64, "nn")]


def make_inputs(m, n, k, layout, count, device="cuda"):
    def one(rows, cols, transposed):
        return torch.randn(cols, rows, device=device).t() if transposed else torch.randn(rows, cols, device=device)
    return [(one(m, k, layout[0] == "t"), one(k, n, layout[1] == "t")) for _ in range(count)]


def add_arguments(parser):
    subset = parser.add_mutually_exclusive_group()
    subset.add_argument("--quick", action="store_true", help="a subset of the shapes")
    subset.add_argument("--target", action="store_true",
                        help="only the target set (4096³, 8192³, 16384³, 8192×14336×4096, 8192×4096×14336)")
    parser.add_argument("--kernels", default="auto,mma_sync",
                        help="comma-separated kernels (pygpukit_torch.dispatch.KERNELS) to time side by "
                             "side with the automatic choice, e.g. auto,mma_sync,mma_sync_medium")
    parser.add_argument("--tf32x3", action="store_true",
                        help="also time precision='tf32x3' (3xTF32), reported against cuBLAS FP32")
    parser.add_argument("--fp32", action="store_true",
                        help="also time precision='fp32' (FP32-accurate: the Ozaki scheme on Hopper for large "
                             "products), reported against cuBLAS FP32")
    parser.add_argument("--ieee", action="store_true",
                        help="also time precision='ieee' (the FP32 kernels: FMA kernel, GEMVs), reported "
                             "against cuBLAS FP32")
    add_common_arguments(parser, min_run_time=0.5)
    parser.add_argument("--json", help="also write this run alone as a results file to FILE (replacing it), "
                                       "e.g. for benchmarks/plot_results.py")


def command(args) -> str:
    """The command line that identifies this run's section in a results file."""
    return ("matmul" + (" --quick" if args.quick else " --target" if args.target else "")
            + (" --tf32x3" if args.tf32x3 else "") + (" --fp32" if args.fp32 else "")
            + (" --ieee" if args.ieee else "") + f" --kernels {args.kernels}")


def run(args) -> int:
    device = pick_device(args)
    header = run_header(device)
    # name -> (fn, context around its timing): a forced kernel's block is
    # entered once around its turns, not per call (it costs host time).
    variants = {
        "pygpukit tf32": (lambda a, b: pygpukit_torch.matmul_tf32(a, b), contextlib.nullcontext),
        "cuBLAS tf32": (torch.matmul, lambda: cublas_tf32(True)),
        "cuBLAS fp32": (torch.matmul, lambda: cublas_tf32(False)),
    }
    # Precisions other than TF32, each reported against cuBLAS FP32.
    fp32_class = [p for p in ("tf32x3", "fp32", "ieee") if getattr(args, p)]
    for precision in fp32_class:
        variants[f"pygpukit {precision}"] = (
            lambda a, b, precision=precision: pygpukit_torch.matmul_tf32(a, b, precision=precision),
            contextlib.nullcontext)
    extra = [k for k in args.kernels.split(",") if k != "auto"]
    for kernel in extra:
        variants[f"pygpukit {kernel}"] = (pygpukit_torch.matmul_tf32,
                                          lambda kernel=kernel: pygpukit_torch.force_kernel(kernel))
    results, rows = [], []
    shapes = (CPU_QUICK if device == "cpu" else QUICK) if args.quick else TARGET_SET if args.target else SHAPES
    for i, (kind, m, n, k, layout) in enumerate(shapes):
        print(f"[{i + 1}/{len(shapes)}] " + "#" * (i + 1) + "." * (len(shapes) - i - 1), flush=True)
        sets = make_inputs(m, n, k, layout, rotation_count(4 * (m * k + k * n), device), device)
        a0, b0 = sets[0]
        ref = torch.matmul(a0.double(), b0.double())
        sub = f"{kind} {m}x{n}x{k} {layout}"
        measured = time_interleaved(variants, sets, "matmul TFLOP/s", sub, len(variants) * args.min_run_time)
        row = {"kind": kind, "M": m, "N": n, "K": k, "layout": layout,
               "kernel": pygpukit_torch.kernel_info(a0, b0), "tflops": {}, "rel_err": {}}
        # The FP32-class precisions may run other kernels (the FMA kernel,
        # the GEMVs, the 3xTF32 kernels): named in their own columns.
        if fp32_class:
            row["kernels"] = {p: pygpukit_torch.kernel_info(a0, b0, precision=p) for p in fp32_class}
        for name, (fn, context) in variants.items():
            with context():
                row["rel_err"][name] = rel_error(fn(a0, b0), ref)
            r = measured[name]
            results.append(r)
            row["tflops"][name] = 2 * m * n * k / r.median / 1e12
        rows.append(row)
        ours, tf, fp = (row["tflops"][v] for v in ("pygpukit tf32", "cuBLAS tf32", "cuBLAS fp32"))
        print(f"{sub:32s} ours {ours:7.1f} TFLOP/s ({2 * m * n * k / ours / 1e6:8.1f} us, "
              f"err {row['rel_err']['pygpukit tf32']:.2e})  cuBLAS tf32 {tf:7.1f} "
              f"(err {row['rel_err']['cuBLAS tf32']:.2e})  fp32 {fp:6.1f}  ratio vs tf32 {ours / tf:.2f}  "
              f"[{row['kernel']}]" + "".join(f"  {k} {row['tflops'][f'pygpukit {k}']:.1f}" for k in extra), flush=True)
        del sets, ref

    benchmark.Compare(results).print()
    section = {"benchmark": "matmul", "command": command(args), "header": header, "rows": rows}
    publish(args, section)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"gpu": header["gpu"], "sections": [section]}, fh, indent=1, ensure_ascii=False)
    return 0
