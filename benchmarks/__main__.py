"""python -m benchmarks SUBCOMMAND [options]  (from the repository root)

  matmul   matmul_tf32 against cuBLAS TF32 and FP32, TFLOP/s (bench_matmul.py)
  mma_sync the portable mma.sync kernel forced, against cuBLAS TF32 and CUTLASS's sm80 kernels (bench_mma_sync.py)
  accuracy the FP32-accurate precisions against cuBLAS FP32 on hard inputs, errors (bench_accuracy.py)
  linear   fused linear_tf32 + GELU against torch, and a Llama-style block (bench_linear.py)
  scope    whole models inside pygpukit_torch.enable() against torch TF32 and FP32 (bench_scope.py)
  decode   decode-sized products, both weight layouts, against cuBLAS (bench_decode.py)
  host     host time per call of tiny products (bench_host.py)
  report   render benchmarks/RESULTS.md from benchmarks/results/*.json (report.py)

The measuring subcommands print a Markdown table; --save writes the run into
benchmarks/results/<gpu>.json, from which `report` regenerates RESULTS.md.
Without a CUDA GPU they run only with --quick, on tiny CPU sizes.
"""

import argparse
import importlib
import sys

SUBCOMMANDS = {
    "matmul": ("bench_matmul", "matmul_tf32 against torch.matmul (cuBLAS) in TF32 and FP32, TFLOP/s"),
    "mma_sync": ("bench_mma_sync", "the portable mma.sync kernel forced, against cuBLAS TF32 and CUTLASS sm80"),
    "accuracy": ("bench_accuracy", "the FP32-accurate precisions against cuBLAS FP32 on hard inputs, errors"),
    "linear": ("bench_linear", "linear_tf32 with fused bias + GELU against torch, and a Llama-style block"),
    "scope": ("bench_scope", "whole models inside pygpukit_torch.enable() against torch TF32 and FP32"),
    "decode": ("bench_decode", "decode-sized products with the weight in both layouts, against cuBLAS"),
    "host": ("bench_host", "host time per call of tiny products"),
    "report": ("report", "render benchmarks/RESULTS.md from benchmarks/results/*.json"),
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = top.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
    for name, (module_name, summary) in SUBCOMMANDS.items():
        module = importlib.import_module(f"{__package__}.{module_name}")
        sub = subparsers.add_parser(name, help=summary, description=module.__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return top


def main(argv=None) -> int:
    top = parser()
    args = top.parse_args(argv)
    if args.subcommand is None:
        top.print_help(sys.stderr)
        return 2
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
