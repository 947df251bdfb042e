"""The process-wide default precision of the pygpukit operators.

A call with ``precision=None`` (every call that does not name one, including
those of :class:`~pygpukit_torch.TF32Linear` built without one) takes the
innermost open :func:`default_precision` block's precision, else the
environment's, read once per process at the first call:
``PYGPUKIT_PRECISION`` (``tf32``, ``tf32x3`` or ``ieee``; empty counts as
unset) if set, else ``ieee`` if ``PYGPUKIT_ALLOW_TF32`` is ``0``, ``false``,
``no`` or ``off`` (any case, surrounding whitespace ignored), else ``tf32``
(for ``1``, ``true``, ``yes``, ``on``, empty or unset; other values raise).
Changing either variable after that first call raises at the next call.

Compiled code follows the block around its call in every torch.compile mode:
a block of another precision than the code was compiled under recompiles it
(CUDA graphs of mode="reduce-overhead" included). A CUDA graph captured by
hand (``torch.cuda.CUDAGraph``) replays the kernels it recorded, as it does
for torch's own matmuls. A program exported inside a block holds that
precision; one exported outside takes the default when it runs.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from ._settings import setting_block
from .ops import PRECISIONS, _check_precision_is_str, _printable

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

    Process-wide: while the block is the innermost open one it applies to
    calls in every thread (blocks that overlap in threads and close out of
    order still leave the right setting). Calls in the block's own thread
    also record the precision, so their backward passes use it after the
    block has closed, and torch.compile'd code called in the block is
    compiled for it.

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
                         f"{', '.join(PRECISIONS)}")
    advice = (f"pass precision={precision!r} to the operators there, or enter the block around the call of the "
              f"compiled function")
    with setting_block("precision", precision, caller="default_precision", advice=advice):
        yield
