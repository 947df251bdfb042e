"""What the benchmarks share: the run's header line, input sets rotated past
the L2 cache, timing with torch.utils.benchmark, the Markdown output."""

import datetime
import itertools
import math

import torch
import torch.utils.benchmark as benchmark

L2_BYTES = 60 * 2 ** 20  # H200; inputs rotate over > 3x this


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


def time_rotating(fn, sets, label, sub_label, description, min_run_time=1.0):
    """blocked_autorange (median of CUDA-synchronized blocks after warm-up)
    of fn(*inputs), each call taking the next input tuple of `sets`."""
    cycle = itertools.cycle(sets)

    def step():
        fn(*next(cycle))

    timer = benchmark.Timer(stmt="step()", globals={"step": step}, label=label, sub_label=sub_label,
                            description=description)
    return timer.blocked_autorange(min_run_time=min_run_time)


def markdown_table(columns, rows) -> list:
    """The lines of a Markdown table: header, separator, one line per row of cells."""
    return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])


def append_markdown(path, table: str) -> None:
    """Appends `table` (and a blank line) to the file at `path`, if given."""
    if path:
        with open(path, "a") as fh:
            fh.write(table + "\n")
