"""The process-wide default precision of the pygpukit operators.

A call with ``precision=None`` (every call that does not name one, including
those of :class:`~pygpukit_torch.TF32Linear` built without one) resolves it
when it runs, from the environment: ``PYGPUKIT_PRECISION`` (``tf32``,
``tf32x3`` or ``ieee``; empty counts as unset) if set, else ``ieee`` if
``PYGPUKIT_ALLOW_TF32`` is ``0``, ``false``, ``no`` or ``off`` (any case,
surrounding whitespace ignored), else ``tf32``. :func:`default_precision` sets ``PYGPUKIT_PRECISION``
for the duration of a ``with`` block.

A compiled graph calls the operators with ``precision=None`` too and so reads
the environment on every run: a ``with`` block around a call of a
``torch.compile``'d function applies to it without recompiling. Inside one it
cannot work: Dynamo cannot trace the environment write (``os.putenv``), and
with ``fullgraph=True`` that is an error, so :func:`default_precision` says
so instead and points to the ``precision=`` argument.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from ._env import environment_variable
from .ops import PRECISIONS, _check_precision_is_str

_ENV = "PYGPUKIT_PRECISION"


@contextlib.contextmanager
def default_precision(precision: Optional[str]) -> Iterator[None]:
    """Run pygpukit operators called without ``precision`` at ``precision``.

    Args:
        precision: ``"tf32"``, ``"tf32x3"`` or ``"ieee"`` (see
            :func:`pygpukit_torch.matmul_tf32`); ``None``, as for the
            operators' own argument, keeps the default in force (the block
            changes nothing), so ``with default_precision(args.precision):``
            works when no precision was given.

    Raises:
        ValueError: an unknown precision.
        TypeError: a precision that is neither a string nor None.
        RuntimeError: entered inside a function that ``torch.compile`` traces;
            pass ``precision=`` to the operators there (or put the ``with``
            block around the call of the compiled function). With
            ``fullgraph=True`` torch reports it as
            ``torch._dynamo.exc.Unsupported`` quoting this error; without,
            Dynamo runs that code eagerly, where the block works. Also
            entered while torch.export, make_fx, torch.fx.symbolic_trace or
            torch.jit.trace records the function: the graph would run
            without the setting.

    Process-wide (an environment variable, read on every call): while the
    block is open it applies to calls in every thread, so it is not meant
    for concurrent use from several threads with different precisions
    (blocks that overlap in threads and close out of order still restore the
    variable correctly). Backward passes run after the block use the
    precision in force when they run.
    """
    if precision is None:
        yield
        return
    _check_precision_is_str("default_precision", precision)  # as the operators' precision argument
    if precision not in PRECISIONS:
        raise ValueError(f"default_precision: unknown precision {precision!r}; expected one of "
                         f"{', '.join(PRECISIONS)}")
    advice = (f"pass precision={precision!r} to the operators there, or enter the block around the call of the "
              f"compiled function")
    with environment_variable(_ENV, precision, caller="default_precision", advice=advice):
        yield
