"""The process-wide default precision of the pygpukit operators.

A call with ``precision=None`` (every call that does not name one, including
those of :class:`~pygpukit_torch.TF32Linear` built without one) takes the
innermost open :func:`default_precision` block's precision, else the
environment's (``PYGPUKIT_PRECISION``, ``PYGPUKIT_ALLOW_TF32``, read once per
process at the first call), else ``tf32``. The full rules, and how blocks
behave under torch.compile, CUDA graphs and export: docs/precision.md.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from ._settings import setting_block
from .ops import PRECISIONS, _check_precision_is_str, _printable

@contextlib.contextmanager
def default_precision(precision: Optional[str]) -> Iterator[None]:
    """Run pygpukit operators called without ``precision`` at ``precision``.

    Process-wide: while the block is the innermost open one it applies to
    calls in every thread. Calls in the block's own thread also record the
    precision, so their backward passes use it after the block has closed,
    and torch.compile'd code called in the block is compiled for it
    (docs/precision.md).

    Args:
        precision: ``"tf32"``, ``"tf32x3"``, ``"fp32"`` or ``"ieee"`` (see
            :func:`pygpukit_torch.matmul_tf32`); ``None`` keeps the default
            in force (the block changes nothing), so
            ``with default_precision(args.precision):`` works when no
            precision was given.

    Raises:
        ValueError: an unknown precision.
        TypeError: a precision that is neither a string nor None.
        RuntimeError: entered inside a function that ``torch.compile``
            traces (pass ``precision=`` to the operators there, or enter the
            block around the call of the compiled function; with
            ``fullgraph=True`` torch reports it as
            ``torch._dynamo.exc.Unsupported``), or while torch.export,
            make_fx, torch.fx.symbolic_trace or torch.jit.trace records the
            function.

    Example:
        >>> with pygpukit_torch.default_precision("tf32x3"):
        ...     c = pygpukit_torch.matmul_tf32(a, b)  # 3xTF32
    """
    if precision is None:
        yield
        return
    _check_precision_is_str("default_precision", precision)  # as the operators' precision argument
    if precision not in PRECISIONS:
        raise ValueError(f"default_precision: unknown precision '{_printable(precision)}'; expected one of "
                         f"{', '.join(map(repr, PRECISIONS))}")
    advice = (f"pass precision={precision!r} to the operators there, or enter the block around the call of the "
              f"compiled function")
    with setting_block("precision", precision, caller="default_precision", advice=advice):
        yield
