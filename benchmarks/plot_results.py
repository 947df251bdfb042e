"""Plot a matmul run from a results file: TFLOP/s against size for the square
shapes (one line per kernel path and for cuBLAS), and every other shape as
grouped bars.

    python benchmarks/plot_results.py benchmarks/results/h200.json docs/bench_tflops.png [--command "matmul ..."]

The run plotted is the file's matmul section of that command, by default the
one with the most shapes (the whole set). Needs matplotlib.
"""

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402

from report import header_line  # noqa: E402  (benchmarks/report.py, next to this file)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", help="a results file (benchmarks/results/<gpu>.json) or one written by "
                                        "`python -m benchmarks matmul --json`")
    parser.add_argument("out", help="PNG to write")
    parser.add_argument("--command", help="the matmul section to plot, e.g. 'matmul --tf32x3 --kernels "
                                          "auto,mma_sync' (default: the one with the most shapes)")
    args = parser.parse_args()
    with open(args.results) as fh:
        sections = [s for s in json.load(fh)["sections"] if s["benchmark"] == "matmul"
                    and args.command in (None, s["command"])]
    if not sections:
        sys.exit(f"{args.results}: no matmul section" + (f" of command {args.command!r}" if args.command else ""))
    run = max(sections, key=lambda s: len(s["rows"]))
    rows = [{**r, **r["tflops"]} for r in run["rows"]]
    series = list(run["rows"][0]["tflops"])

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw={"width_ratios": [1, 2]})
    squares = sorted((r for r in rows if r["kind"] == "square"), key=lambda r: r["M"])
    for name in series:
        left.plot([r["M"] for r in squares], [r[name] for r in squares], marker="o", label=name)
    left.set_xscale("log", base=2)
    left.set_xlabel("M = N = K (row-major A and B)")
    left.set_ylabel("TFLOP/s")
    left.set_title("Square matmul")
    left.grid(True, alpha=0.3)
    left.legend()

    others = [r for r in rows if r["kind"] != "square"]
    width = 0.8 / len(series)
    for i, name in enumerate(series):
        right.bar([x + i * width for x in range(len(others))], [r[name] for r in others], width, label=name)
    right.set_xticks([x + 0.4 - width / 2 for x in range(len(others))])
    right.set_xticklabels([f"{r['kind']}\n{r['M']}x{r['N']}x{r['K']} {r['layout']}" for r in others],
                          rotation=60, ha="right", fontsize=7)
    right.set_yscale("log")
    right.set_ylabel("TFLOP/s (log)")
    right.set_title("LLM, odd, decode and layout shapes (layout: A then B, n row-major, t transposed; nt is F.linear's)")
    right.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"python -m benchmarks {run['command']} · {header_line(run['header'])}", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
