"""What the benchmarks share: the run's header line, input sets rotated past
the L2 cache, interleaved timing with torch.utils.benchmark, the Markdown output."""

import datetime
import itertools
import math

import torch
import torch.utils.benchmark as benchmark

L2_BYTES = 60 * 2 ** 20  # H200; inputs rotate over > 3x this
# The decode benchmarks' weights, (N, K): a 4096-wide model's attention
# projection and its MLP's up and down projections (Llama-3-8B's sizes).
DECODE_WEIGHTS = ((4096, 4096), (14336, 4096), (4096, 14336))


def run_header() -> str:
    """Date, GPU name and versions: the first line of every table. Exits
    with a message when there is no CUDA GPU (every benchmark needs one)."""
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU (torch.cuda.is_available() is False)")
    return (f"{datetime.date.today()} · {torch.cuda.get_device_name()} · torch {torch.__version__} · "
            f"CUDA {torch.version.cuda}")


def rotation_count(bytes_per_set: int) -> int:
    """How many input sets of this size exceed 3x the L2 cache together, so
    that small shapes are not timed out of L2."""
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


def geomean(values) -> float:
    """Geometric mean of positive numbers (ratios to cuBLAS)."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


def markdown_table(columns, rows) -> list:
    """The lines of a Markdown table: header, separator, one line per row of cells."""
    return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])


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
