"""decode: decode-sized matmuls with the weight in both layouts a model may
keep it: `x @ W` with W stored [in, out] (row-major B, GPT-2's Conv1D) and
`x @ Wt.T` with Wt stored [out, in] (column-major B, nn.Linear / F.linear),
the same values in both, for pygpukit and torch.matmul (cuBLAS TF32),
interleaved (_common.time_interleaved) over input sets larger than L2.

Prints a Markdown table: microseconds per call (host time included), the
ratio cuBLAS / ours for each weight layout, the weight bytes per second
that ours reaches with the row-major weight, relative error, and the kernel.

    python -m benchmarks decode [--single-row-batches] [--min-run-time 0.3] [--markdown OUT.md] [--save [FILE]]

--single-row-batches shapes x as [M, 1, K]: M batches of one row each, as
torch.matmul sees a decode step's M tokens of shape [batch, 1, hidden].
"""

import contextlib

import torch

import pygpukit_torch
from pygpukit_torch.testing import cublas_tf32, rel_error

from ._common import DECODE_WEIGHTS, add_common_arguments, pick_device, publish, rotation_count, run_header, \
    time_interleaved

ROWS = (1, 16, 64, 128)
# --quick: without a GPU, tiny sizes that run the tool, not the kernels.
QUICK_ROWS, CPU_ROWS, CPU_WEIGHTS = (1, 16, 128), (1, 4), ((64, 96),)


def add_arguments(parser):
    parser.add_argument("--quick", action="store_true", help="M in {1, 16, 128} only")
    parser.add_argument("--single-row-batches", action="store_true", help="x as [M, 1, K] instead of [M, K]")
    add_common_arguments(parser, min_run_time=0.3)


def command(args) -> str:
    return "decode" + (" --quick" if args.quick else "") + (" --single-row-batches" if args.single_row_batches else "")


def run(args) -> int:
    device = pick_device(args)
    header = run_header(device)
    rows_m, weights = (CPU_ROWS, CPU_WEIGHTS) if device == "cpu" else (QUICK_ROWS if args.quick else ROWS,
                                                                       DECODE_WEIGHTS)
    ours = (lambda x, w: pygpukit_torch.matmul_tf32(x, w), contextlib.nullcontext)
    cublas = (lambda x, w: torch.matmul(x, w), lambda: cublas_tf32(True))
    rows = []
    for m in rows_m:
        for n, k in weights:
            count = rotation_count(4 * (m * k + k * n), device)
            x_shape = (m, 1, k) if args.single_row_batches else (m, k)
            row_major = [(torch.randn(x_shape, device=device), torch.randn(k, n, device=device))
                         for _ in range(count)]
            col_major = [(x, w.t().contiguous().t()) for x, w in row_major]
            label = f"{m}x{n}x{k}"
            nn = time_interleaved({"ours": ours, "cublas": cublas}, row_major, "x @ W", label, args.min_run_time)
            nt = time_interleaved({"ours": ours, "cublas": cublas}, col_major, "x @ Wt.T", label, args.min_run_time)
            us = {key: t.median * 1e6 for key, t in (("ours x @ W", nn["ours"]), ("cuBLAS x @ W", nn["cublas"]),
                                                    ("ours x @ Wt.T", nt["ours"]), ("cuBLAS x @ Wt.T", nt["cublas"]))}
            x, w = row_major[0]
            rows.append({"M": m, "N": n, "K": k, "us": us,
                         "ratio": {"x @ W": us["cuBLAS x @ W"] / us["ours x @ W"],
                                   "x @ Wt.T": us["cuBLAS x @ Wt.T"] / us["ours x @ Wt.T"]},
                         "weight_GBps": 4 * k * n / us["ours x @ W"] / 1e3,
                         "rel_err": rel_error(pygpukit_torch.matmul_tf32(x, w), x.double() @ w.double()),
                         "kernel": pygpukit_torch.kernel_info(x, w)})
            print(f"{label:18s} " + "  ".join(f"{key} {v:.1f} us" for key, v in us.items()), flush=True)
    publish(args, {"benchmark": "decode", "command": command(args), "header": header, "rows": rows})
    return 0
