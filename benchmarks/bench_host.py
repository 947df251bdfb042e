"""host: host time per call: products so small (64 x 64 weights) that the
GPU's work is negligible, so the time per call is what the Python wrapper,
the dispatcher, the op's C++ side and the launches cost on the host. At
decode sizes this is what bounds an eager model whose kernels are short: a
call that costs more host time than its kernel leaves the GPU idle.

Variants, interleaved (_common.time_interleaved): pygpukit's wrapper
(`pygpukit_torch.matmul_tf32` / `linear_tf32`), the operator it calls
(`torch.ops.pygpukit.*.default`), a swapped `TF32Linear` layer, and torch's
own (`torch.matmul` with TF32 allowed, `F.linear`, `nn.Linear`). Prints a
Markdown table of microseconds per call.

    python -m benchmarks host [--quick] [--min-run-time 0.5] [--markdown OUT.md] [--save [FILE]]
"""

import contextlib

import torch
import torch.nn.functional as F

import pygpukit_torch
from pygpukit_torch.testing import cublas_tf32

from ._common import add_common_arguments, pick_device, publish, run_header, time_interleaved

SHAPES = ((1, 64, 64), (128, 64, 64))  # M, K, N


def add_arguments(parser):
    parser.add_argument("--quick", action="store_true", help="M = 1 only")
    add_common_arguments(parser, min_run_time=0.5)


def command(args) -> str:
    return "host" + (" --quick" if args.quick else "")


def run(args) -> int:
    device = pick_device(args)
    header = run_header(device)
    tf32 = lambda: cublas_tf32(True)  # noqa: E731
    rows = []
    for m, k, n in SHAPES[:1] if args.quick else SHAPES:
        x, w = torch.randn(m, k, device=device), torch.randn(n, k, device=device)
        bias = torch.randn(n, device=device)
        layer = torch.nn.Linear(k, n, device=device)
        swapped = pygpukit_torch.TF32Linear.from_linear(layer)
        # Each group of variants with the arguments its calls take.
        groups = (({"pygpukit_torch.matmul_tf32(x, W.T)": (pygpukit_torch.matmul_tf32, contextlib.nullcontext),
                    "torch.ops.pygpukit.matmul_tf32.default": (torch.ops.pygpukit.matmul_tf32.default,
                                                               contextlib.nullcontext),
                    "torch.matmul (TF32)": (torch.matmul, tf32)},
                   (x, w.mT)),
                  ({"pygpukit_torch.linear_tf32(x, W, b)": (pygpukit_torch.linear_tf32, contextlib.nullcontext),
                    "torch.ops.pygpukit.linear_tf32.default": (
                        lambda a, b, c: torch.ops.pygpukit.linear_tf32.default(a, b, c, "none"),
                        contextlib.nullcontext),
                    "F.linear (TF32)": (F.linear, tf32),
                    "TF32Linear layer": (lambda a, b, c: swapped(a), contextlib.nullcontext),
                    "nn.Linear layer (TF32)": (lambda a, b, c: layer(a), tf32)},
                   (x, w, bias)))
        timed = {}
        for variants, args_of_call in groups:
            timed.update(time_interleaved(variants, [args_of_call], "host", f"{m}x{k}x{n}", args.min_run_time))
        for name, measurement in timed.items():
            rows.append({"shape": f"{m}x{k}x{n}", "call": name, "us": measurement.median * 1e6})
    publish(args, {"benchmark": "host", "command": command(args), "header": header, "rows": rows})
    return 0
