"""Setting an environment variable for the duration of a ``with`` block: how
the Python overrides reach the C++ side, which reads them on every call."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch

_AROUND_THE_CALL = "enter the block around the call of the compiled function"


@contextlib.contextmanager
def environment_variable(name: str, value: str, *, caller: str, advice: str = _AROUND_THE_CALL) -> Iterator[None]:
    """``os.environ[name] = value`` inside the block; the previous value (or
    its absence) is restored on exit, exceptions included.

    Raises RuntimeError, naming `caller` and ending with `advice`, when
    entered while torch.compile traces: Dynamo cannot trace the environment
    write, and the compiled graph reads the variable on every run anyway."""
    if torch.compiler.is_compiling():
        raise RuntimeError(f"{caller}: cannot be used inside a torch.compile'd function (it sets the environment "
                           f"variable {name}, which compiled code cannot); {advice}")
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous
