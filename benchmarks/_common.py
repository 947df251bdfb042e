"""What the benchmarks share: the device, the run's header, input sets rotated
past the L2 cache, interleaved timing with torch.utils.benchmark, the results
file and the Markdown output."""

import datetime
import itertools
import math
import pathlib
import subprocess

import torch
import torch.utils.benchmark as benchmark

from .report import header_line, markdown_table, render_section, results_path, save_section  # noqa: F401

L2_BYTES = 60 * 2 ** 20  # H200; inputs rotate over > 3x this
# The decode benchmarks' weights, (N, K): a 4096-wide model's attention
# projection and its MLP's up and down projections (Llama-3-8B's sizes).
DECODE_WEIGHTS = ((4096, 4096), (14336, 4096), (4096, 14336))
ROOT = pathlib.Path(__file__).resolve().parents[1]


def add_common_arguments(parser, min_run_time=None) -> None:
    """The options every measuring subcommand takes (--min-run-time only
    where it times something: min_run_time given)."""
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="auto: the CUDA GPU if there is one, else the CPU (only with --quick: tiny "
                             "sizes that check the tool, not the kernels)")
    if min_run_time is not None:
        parser.add_argument("--min-run-time", type=float, default=min_run_time,
                            help=f"seconds of timing per variant and shape, in 5 turns (default {min_run_time})")
    parser.add_argument("--markdown", help="append the results table to this file")
    parser.add_argument("--save", nargs="?", const="", metavar="FILE",
                        help="write this run into a results file, replacing the section of the same command: "
                             "by default benchmarks/results/<gpu>.json, from which `report` renders RESULTS.md")


def pick_device(args) -> str:
    """The device the run measures on: "cuda" or "cpu". Without a GPU a run
    needs --quick (tiny CPU sizes); otherwise it exits with a message."""
    if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: there is no CUDA GPU here (torch.cuda.is_available() is False)")
        return "cuda"
    if not getattr(args, "quick", False):
        reason = "--device cpu" if torch.cuda.is_available() else "there is no CUDA GPU here"
        raise SystemExit(f"benchmarks {args.subcommand}: {reason}; on the CPU only --quick runs (tiny sizes that "
                         f"check the tool, not the kernels)")
    if args.save == "":
        raise SystemExit("--save without a FILE needs a GPU (the results files hold GPU runs); name a FILE")
    if hasattr(args, "min_run_time"):
        args.min_run_time = min(args.min_run_time, 0.02)
    print("CPU run, tiny sizes: torch.matmul stands in for cuBLAS; the numbers say nothing about the GPU kernels")
    return "cpu"


def git_commit():
    """The checkout's commit (7 hex digits, "+dirty" with uncommitted changes to
    tracked files), or None outside a git checkout."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty else "")


def run_header(device: str = "cuda") -> dict:
    """Date, GPU, versions and commit: the heading of every table and the
    header of a results section. For "cuda", exits with a message when there
    is no CUDA GPU."""
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU (torch.cuda.is_available() is False)")
    return {"gpu": torch.cuda.get_device_name() if device == "cuda" else "CPU",
            "date": str(datetime.date.today()), "commit": git_commit(), "torch": torch.__version__,
            "cuda": torch.version.cuda if device == "cuda" else None}


def publish(args, section: dict) -> None:
    """Prints the section's table, appends it to --markdown, writes --save."""
    table = "\n".join(render_section(section)) + "\n"
    print(table)
    append_markdown(args.markdown, table)
    if args.save is not None:
        path = args.save or results_path(section["header"]["gpu"])
        save_section(path, section)
        print(f"saved to {path}")


def rotation_count(bytes_per_set: int, device: str = "cuda") -> int:
    """How many input sets of this size exceed 3x the L2 cache together, so
    that small shapes are not timed out of L2 (one on the CPU)."""
    if device != "cuda":
        return 1
    return max(1, math.ceil(3 * L2_BYTES / bytes_per_set))


def time_interleaved(variants, sets, label, sub_label, min_run_time=1.0, rounds=5):
    """Time per call of every variant, {name: Measurement}: `variants` maps a
    name to (fn, context) where context() wraps its timing (e.g. torch's TF32
    setting); each call of fn(*inputs) takes the next input tuple of `sets`.

    torch.utils.benchmark, CUDA-synchronized, after warm-up; the variants take
    turns, `rounds` times (each round starting one variant later), each turn
    a block of about min_run_time / rounds seconds, and each Measurement
    holds its variant's blocks (median over them). Timed one after the other instead, whichever variant ran while the
    GPU was hotter lost: the H200's clock drops under sustained load, and
    sequential runs on 2026-12-01 put ours at 0.94-0.97x cuBLAS at 8192^3 and
    16384^3 where turns gave 1.00-1.03x.
    """
    timers, numbers = {}, {}
    for name, (fn, context) in variants.items():
        cycle = itertools.cycle(sets)

        def step(fn=fn, cycle=cycle):
            fn(*next(cycle))

        timers[name] = benchmark.Timer(stmt="step()", globals={"step": step}, label=label,
                                       sub_label=sub_label, description=name)
        with context():
            step()  # warm-up: kernel selection, workspace allocation
            once = timers[name].timeit(1).median
        numbers[name] = max(1, int(min_run_time / rounds / max(once, 1e-6)))
    blocks = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        # Each round starts with the next variant: none always follows the same one.
        for name in names[r % len(names):] + names[:r % len(names)]:
            with variants[name][1]():
                blocks[name].append(timers[name].timeit(numbers[name]))
    return {name: benchmark.Measurement.merge(measurements)[0] for name, measurements in blocks.items()}


def append_markdown(path, table: str) -> None:
    """Appends `table` (and a blank line) to the file at `path`, if given."""
    if path:
        with open(path, "a") as fh:
            fh.write(table + "\n")


def device_time_ms(fn) -> float:
    """Milliseconds of GPU work that one fn() enqueues, timed with CUDA
    events. A GPU-side sleep (~1 ms on an H200) is queued first, so the GPU
    is still busy with it while the host records the start event and
    enqueues fn's work: the interval holds the GPU's work only, not the
    host's dispatch or a graph's launch latency."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(2_000_000)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)
