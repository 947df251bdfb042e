"""Call-to-call spread of one product under settings of an environment
switch that the dispatcher reads on every call (PYGPUKIT_STREAM_K,
PYGPUKIT_KERNEL, or an experiment's own), in one process: each call timed
alone (CUDA events around it, synchronized after), the settings taking
turns call by call (every other round in reverse order), so that clock
drift hits all alike. Where a product's speed varies from call to call
(3xTF32 at 16384^3: 98-133 ms, session 28), the median and the range of
single calls say more than a mean over many.

Prints a Markdown table: per shape and setting, the median, minimum and
maximum in ms, TFLOP/s at the median, and every call's time.

    python benchmarks/bench_per_call.py --env PYGPUKIT_STREAM_K --values "unset;0"
        [--shapes 16384x16384x16384,...] [--precision tf32x3] [--calls 8]

A value "unset" leaves the variable unset.
"""

import argparse
import statistics

import torch

import pygpukit_torch
from _common import environment, markdown_table, run_header


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True, help="the environment variable to vary")
    parser.add_argument("--values", required=True, help="semicolon-separated values; 'unset' leaves it unset")
    parser.add_argument("--shapes", default="8192x8192x8192,16384x16384x16384",
                        help="comma-separated MxNxK (a @ b, both row-major)")
    parser.add_argument("--precision", default="tf32x3", choices=("tf32", "tf32x3", "ieee"))
    parser.add_argument("--calls", type=int, default=8, help="timed calls per setting and shape")
    args = parser.parse_args()
    values = args.values.split(";")

    def setting(value):
        return environment(args.env, None if value == "unset" else value)

    print(run_header(), f"· precision {args.precision} · {args.env}")
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(d) for d in shape.split("x"))
        inputs = (torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda"))
        for value in values:  # warm-up: kernel choice, workspace
            with setting(value):
                pygpukit_torch.matmul_tf32(*inputs, precision=args.precision)
        torch.cuda.synchronize()
        times = {value: [] for value in values}
        for i in range(args.calls):
            for value in values if i % 2 == 0 else values[::-1]:
                with setting(value):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    pygpukit_torch.matmul_tf32(*inputs, precision=args.precision)
                    end.record()
                    torch.cuda.synchronize()
                times[value].append(start.elapsed_time(end))
        for value in values:
            t = times[value]
            median = statistics.median(t)
            rows.append([shape, value, f"{median:.2f}", f"{min(t):.2f}", f"{max(t):.2f}",
                         f"{2 * m * n * k / median / 1e9:.1f}", " ".join(f"{x:.1f}" for x in t)])
        del inputs
    print("\n".join(markdown_table(["shape (nn)", args.env, "median ms", "min ms", "max ms", "TFLOP/s (median)",
                                    "calls (ms)"], rows)))


if __name__ == "__main__":
    main()
