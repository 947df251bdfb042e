"""The with blocks that change a setting of the operators (default_precision,
force_kernel): process-wide state in the C++ library, and a marker on the
entering thread's torch-function mode stack so that torch.compile guards on
it (a change recompiles rather than replaying code, or a CUDA graph,
recorded under another setting)."""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Callable, Dict, Iterator, List, Optional, Tuple, Type

import torch
from torch.overrides import TorchFunctionMode

_AROUND_THE_CALL = "enter the block around the call of the compiled or traced function"

# The blocks still open, per setting, in the order they were entered: blocks
# in several threads may close in any order, and the innermost still open
# is the one in force.
_lock = threading.Lock()
_open: Dict[str, List[Tuple[object, str]]] = {}
# The same per context (a thread, or an asyncio task within one): what the
# calls made there record. Tuples, replaced rather than changed, so that a
# task's copy of the context stays its own.
_context_blocks: Dict[str, contextvars.ContextVar] = {
    setting: contextvars.ContextVar(f"pygpukit_{setting}_blocks", default=()) for setting in ("precision", "kernel")}


def context_innermost(setting: str) -> Optional[str]:
    """Return the innermost block of `setting` still open in this thread or asyncio task.

    Args:
        setting: ``"precision"`` or ``"kernel"``.

    Returns:
        The block's value, or None: none is open here, or torch.compile is
        tracing (Dynamo cannot read a ContextVar; the process-wide setting
        applies).

    Example:
        >>> with setting_block("precision", "ieee", caller="example"):
        ...     context_innermost("precision")
        'ieee'
    """
    if torch.compiler.is_compiling():
        return None
    blocks = _context_blocks[setting].get()
    return blocks[-1][1] if blocks else None


def _setter(setting: str) -> Callable[[Optional[str]], None]:
    return {"precision": torch.ops.pygpukit._set_default_precision,
            "kernel": torch.ops.pygpukit._set_forced_kernel}[setting]


def _ops_taking_precision() -> Tuple[object, ...]:
    ops = torch.ops.pygpukit
    packets = (ops.matmul_tf32, ops.linear_tf32, ops.matmul_kernel_info)
    return packets + tuple(p.default for p in packets)


# A torch-function mode may see either the packet or its overload.
_PRECISION_OPS = _ops_taking_precision()
_PRECISION_OP_SET = frozenset(_PRECISION_OPS)


def _takes_precision(func) -> bool:
    if torch.compiler.is_compiling():  # what Dynamo traces: identity tests
        return any(func is op for op in _PRECISION_OPS)
    try:
        return func in _PRECISION_OP_SET  # eager: one hash lookup per torch call in the block
    except TypeError:  # an unhashable callable
        return False


class _SettingMode(TorchFunctionMode):
    """On the torch-function mode stack while a block is open in this thread.

    Dynamo guards on the stack's modes, so a compiled function called inside
    a block of another setting than it was compiled under recompiles (its
    CUDA graphs, under mode="reduce-overhead", are recorded anew), and calls
    it outside again reuse the code compiled outside. Each (setting, value)
    is its own subclass (see _mode_type), so the guard tells values apart.
    A precision block also writes its precision into the pygpukit calls
    made in this thread without one, so that a traced graph holds it."""

    setting: str = ""
    value: str = ""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.setting == "precision" and _takes_precision(func) and kwargs.get("precision") is None:
            # The thread's innermost block, not necessarily this one: blocks
            # of asyncio tasks or generators may close out of order.
            kwargs = {**kwargs, "precision": context_innermost("precision") or self.value}
        return func(*args, **kwargs)

    def __exit__(self, exc_type, exc_value, traceback):
        # Removes this mode wherever it is on the stack: a block that closes
        # out of order (asyncio tasks, generators) must not pop another's.
        above = []
        while torch._C._len_torch_function_stack() > 0:
            mode = torch._C._pop_torch_function_stack()
            if mode is self:
                break
            above.append(mode)
        for mode in reversed(above):
            torch._C._push_on_torch_function_stack(mode)


_mode_types: Dict[Tuple[str, str], Type[_SettingMode]] = {}


def _mode_type(setting: str, value: str) -> Type[_SettingMode]:
    with _lock:
        key = (setting, value)
        if key not in _mode_types:
            name = f"_{setting.capitalize()}Is_{value}"
            _mode_types[key] = type(name, (_SettingMode,), {"setting": setting, "value": value})
        return _mode_types[key]


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
def setting_block(setting: str, value: str, *, caller: str, advice: str = _AROUND_THE_CALL) -> Iterator[None]:
    """Set `setting` to `value` for the duration of a ``with`` block.

    The setting is process-wide: while the block is the innermost open one
    it applies to calls in every thread. On exit (exceptions included) the
    setting returns to the innermost block still open, or, when none is,
    to the environment's value: blocks that overlap in several threads and
    close out of order leave no setting behind. A torch-function mode on
    this thread's stack makes torch.compile guard on the setting.

    Args:
        setting: ``"precision"`` or ``"kernel"``.
        value: the value to set (already checked by the caller).
        caller: the public function's name, for the error message.
        advice: how to avoid the error, ending the message.

    Raises:
        RuntimeError: naming `caller` and ending with `advice`, when entered
            while a tracer records a graph (torch.compile, torch.export,
            make_fx, torch.fx.symbolic_trace, torch.jit.trace): the graph
            would not keep the setting.

    Example:
        >>> with setting_block("kernel", "mma_sync", caller="force_kernel"):
        ...     c = pygpukit_torch.matmul_tf32(a, b)
    """
    # Dynamo's check stays here rather than in _tracer: from inside that
    # helper, a torch.compile'd function without fullgraph raised this error
    # instead of running the block eagerly after the graph break. The message
    # names both users of Dynamo: which one traces cannot be told reliably
    # from traced code (torch 2.11's Dynamo folds torch.compiler.is_exporting()
    # to True under plain torch.compile as well).
    what = {"precision": "the default precision", "kernel": "the forced kernel"}[setting]
    if torch.compiler.is_compiling():
        raise RuntimeError(f"{caller}: cannot be used inside a function compiled by torch.compile or traced by "
                           f"torch.export (it changes {what} of the whole process, which compiled code cannot); "
                           f"{advice}")
    tracer = _tracer()
    if tracer is not None:
        raise RuntimeError(f"{caller}: cannot be used inside {tracer} (it changes {what} of the whole process, "
                           f"which the traced graph does not keep); {advice}")
    block = (object(), value)  # equal to no other block: tuples compare their objects by identity
    with _lock:
        blocks = _open.setdefault(setting, [])
        _setter(setting)(value)
        blocks.append(block)
    here = _context_blocks[setting]
    here.set(here.get() + (block,))
    try:
        with _mode_type(setting, value)():
            yield
    finally:
        here.set(tuple(b for b in here.get() if b is not block))
        with _lock:
            blocks.remove(block)
            _setter(setting)(blocks[-1][1] if blocks else None)


def innermost(setting: str) -> Optional[str]:
    """Return the value of the innermost open block of `setting` in any thread.

    Args:
        setting: ``"precision"`` or ``"kernel"``.

    Returns:
        The value, or None when no block of `setting` is open.

    Example:
        >>> innermost("precision") is None  # outside every default_precision block
        True
    """
    with _lock:
        blocks = _open.get(setting)
        return blocks[-1][1] if blocks else None
