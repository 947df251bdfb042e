"""Setting an environment variable for the duration of a ``with`` block: how
the Python overrides reach the C++ side, which reads them on every call."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Dict, Iterator, List, Optional, Tuple

import torch

_AROUND_THE_CALL = "enter the block around the call of the compiled or traced function"

# The blocks still open, per variable, in the order they were entered, and
# each variable's value before the first of them: blocks in several threads
# may close in any order.
_lock = threading.Lock()
_open: Dict[str, List[Tuple[object, str]]] = {}
_before: Dict[str, Optional[str]] = {}


def _tracer() -> Optional[str]:
    """Which tracer other than Dynamo records a graph of this Python code
    right now, or None."""
    if torch.jit.is_tracing():
        return "a function traced by torch.jit.trace"
    from torch.fx import _symbolic_trace
    from torch.fx.experimental import proxy_tensor
    # These helpers are internal to torch.fx; where one is missing, that
    # tracer goes undetected rather than failing here. Newer torch logs a
    # deprecation warning from is_fx_tracing and offers
    # is_fx_symbolic_tracing instead.
    get_proxy_mode = getattr(proxy_tensor, "get_proxy_mode", None)
    if get_proxy_mode is not None and get_proxy_mode() is not None:
        return "a function traced by make_fx or torch.export"
    is_fx_tracing = (getattr(_symbolic_trace, "is_fx_symbolic_tracing", None)
                     or getattr(_symbolic_trace, "is_fx_tracing", None))
    if is_fx_tracing is not None and is_fx_tracing():
        return "a function traced by torch.fx.symbolic_trace"
    return None


@contextlib.contextmanager
def environment_variable(name: str, value: str, *, caller: str, advice: str = _AROUND_THE_CALL) -> Iterator[None]:
    """``os.environ[name] = value`` inside the block. On exit (exceptions
    included) the variable takes the value of the most recently entered
    block still open, or, when none is, the value it had before the first
    (or its absence): blocks that overlap in several threads and close out
    of order leave no setting behind. The variable is process-wide, so a
    block applies to calls in every thread while it is the latest open.

    Raises RuntimeError, naming `caller` and ending with `advice`, when
    entered while a tracer records a graph (torch.compile, torch.export,
    make_fx, torch.fx.symbolic_trace, torch.jit.trace): the graph would not
    keep the setting (Dynamo cannot trace the environment write; the others
    record the operators without it), and the recorded operators read the
    variable when the graph runs."""
    # Dynamo's check stays here rather than in _tracer: from inside that
    # helper, a torch.compile'd function without fullgraph raised this error
    # instead of running the block eagerly after the graph break. The message
    # names both users of Dynamo: which one traces cannot be told reliably
    # from traced code (torch 2.11's Dynamo folds torch.compiler.is_exporting()
    # to True under plain torch.compile as well).
    if torch.compiler.is_compiling():
        raise RuntimeError(f"{caller}: cannot be used inside a function compiled by torch.compile or traced by "
                           f"torch.export (it sets the environment variable {name}, which compiled code cannot); "
                           f"{advice}")
    tracer = _tracer()
    if tracer is not None:
        raise RuntimeError(f"{caller}: cannot be used inside {tracer} (it sets the environment variable {name}, "
                           f"which the traced graph does not keep); {advice}")
    block = (object(), value)  # equal to no other block: tuples compare their objects by identity
    with _lock:
        blocks = _open.setdefault(name, [])
        if not blocks:
            _before[name] = os.environ.get(name)
        blocks.append(block)
        os.environ[name] = value
    try:
        yield
    finally:
        with _lock:
            blocks.remove(block)
            if blocks:
                os.environ[name] = blocks[-1][1]
            elif _before[name] is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = _before[name]
