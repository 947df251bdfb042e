"""Call-to-call spread of one product under settings of an environment
switch that the dispatcher reads on every call (PYGPUKIT_STREAM_K,
PYGPUKIT_KERNEL, or an experiment's own), in one process: each call timed
alone (_common.device_time_ms: CUDA events, the host's dispatch kept
out), the settings taking turns call by call (every other round in
reverse order), so that clock drift hits all alike. The inputs are not rotated: use
products larger than L2. Where a product's speed varies from call to call
(3xTF32 at 16384^3 by a third, session 28), the median and the range of
single calls say more than a mean over many.

Prints a Markdown table: per shape and setting, the median, minimum and
maximum in ms, TFLOP/s at the median, and every call's time.

    python benchmarks/bench_per_call.py --env PYGPUKIT_STREAM_K --values "1;0"
        [--shapes 16384x16384x16384,...] [--precision tf32] [--calls 8] [--warmup 2]
"""

import argparse
import functools
import statistics

import torch

import pygpukit_torch
from _common import device_time_ms, markdown_table, run_header
from pygpukit_torch._env import environment_variable


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True, help="the environment variable to vary")
    parser.add_argument("--values", required=True, help="semicolon-separated values")
    parser.add_argument("--shapes", default="8192x8192x8192,16384x16384x16384",
                        help="comma-separated MxNxK (a @ b, both row-major)")
    parser.add_argument("--precision", default="tf32", choices=("tf32", "tf32x3", "ieee"))
    parser.add_argument("--calls", type=int, default=8, help="timed calls per setting and shape")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds over all settings first")
    args = parser.parse_args()
    values = list(dict.fromkeys(args.values.split(";")))  # each once, in order

    def setting(value):
        return environment_variable(args.env, value, caller="bench_per_call")

    print(run_header(), f"· precision {args.precision} · {args.env}")
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(d) for d in shape.split("x"))
        call = functools.partial(pygpukit_torch.matmul_tf32, torch.randn(m, k, device="cuda"),
                                 torch.randn(k, n, device="cuda"), precision=args.precision)
        for _ in range(args.warmup):  # kernel choice, workspace, clocks
            for value in values:
                with setting(value):
                    call()
        torch.cuda.synchronize()
        times = {value: [] for value in values}
        for i in range(args.calls):
            for value in values if i % 2 == 0 else values[::-1]:
                with setting(value):
                    times[value].append(device_time_ms(call))
        for value in values:
            t = times[value]
            median = statistics.median(t)
            rows.append([shape, value, f"{median:.2f}", f"{min(t):.2f}", f"{max(t):.2f}",
                         f"{2 * m * n * k / median / 1e9:.1f}", " ".join(f"{x:.1f}" for x in t)])
        del call  # and its inputs
    print("\n".join(markdown_table(["shape (nn)", args.env, "median ms", "min ms", "max ms", "TFLOP/s (median)",
                                    "calls (ms)"], rows)))


if __name__ == "__main__":
    main()
