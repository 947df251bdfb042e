"""``nn.Linear`` on pygpukit's fused TF32 linear op, and the helpers that swap
a model's Linear layers for it and back.

The swap mechanism (:func:`swap_linear_`, :func:`unswap_linear_`,
:func:`swapped_linear`) is generic: which layers it may replace is decided by
what a TF32Linear can represent faithfully (exact ``nn.Linear``, float32,
real Parameters, no hooks). Which layers are worth replacing is a separate,
replaceable policy (:func:`default_policy`), and the caller's
``filter_fn(module, fqn)`` narrows it further, as in torchao's ``quantize_``.
Reference: docs/linear_layers.md.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn

from .ops import (_LINEAR_TF32, ACTIVATIONS, _activation_name, _check_precision, _check_precision_type,
                  _check_wrapper_args, _checked_on_failure, _unknown_activation)

log = logging.getLogger(__name__)

FilterFn = Callable[[nn.Module, str], bool]
Policy = Callable[[nn.Linear, str], Optional[str]]


def _check_options(activation: Optional[str], precision: Optional[str], caller: str = "TF32Linear") -> str:
    """The activation's name (None: "none"; not a string: TypeError) once it
    and the precision are known."""
    activation = _activation_name(caller, activation)
    if activation not in ACTIVATIONS:
        raise ValueError(_unknown_activation(caller, activation))
    _check_precision_type(caller, precision)
    _check_precision(caller, precision)
    return activation


class TF32Linear(nn.Linear):
    """Drop-in ``nn.Linear`` computing ``act(x @ weight.T + bias)`` with :func:`pygpukit_torch.linear_tf32`.

    Same parameters, ``state_dict`` keys and ``extra_repr`` as ``nn.Linear``
    (plus ``activation=`` / ``precision=`` when set), so a checkpoint loads
    into either class; ``activation`` and ``precision`` are plain
    attributes, checked when set. More in docs/linear_layers.md.

    Args:
        in_features, out_features, bias, device: as ``nn.Linear``.
        dtype: ``None`` or ``torch.float32`` (the op's only dtype).
        activation: ``"none"`` (default; ``None`` means the same),
            ``"relu"``, ``"gelu"``, ``"gelu_tanh"`` or ``"silu"``, applied
            after the bias in the kernel's epilogue.
        precision: ``"tf32"``, ``"tf32x3"``, ``"fp32"``, ``"ieee"`` or
            ``None``, as for :func:`pygpukit_torch.matmul_tf32`.

    Shapes: input ``[..., in_features]`` float32, output ``[..., out_features]``.

    Raises:
        ValueError: an unknown activation or precision, or a dtype other than
            float32 (at construction).
        TypeError: an activation or precision that is not a string (or None).
        RuntimeError: from forward, an input that is not a dense float32
            tensor or whose last dimension is not ``in_features``, or
            parameters converted to another dtype after construction
            (``model.half()``).

    Example:
        >>> layer = TF32Linear(4096, 14336, activation="silu", device="cuda")
        >>> y = layer(torch.randn(8, 4096, device="cuda"))
    """

    # The attributes' types for torch.jit.script, which otherwise types each
    # by its value when scripted: a layer scripted with precision None could
    # not be given a precision afterwards, nor one scripted with a name None.
    # Real types, not annotations: under this module's `from __future__
    # import annotations` those would be strings, which TorchScript refuses.
    __annotations__ = {"activation": str, "precision": Optional[str]}

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 activation: Optional[str] = "none", precision: Optional[str] = None):
        """Create the layer; the arguments are those of the class docstring."""
        activation = _check_options(activation, precision)
        if dtype is not None and dtype != torch.float32:
            raise ValueError(f"TF32Linear: parameters must be float32 (the op's only dtype), got dtype={dtype}")
        # float32 whatever torch.get_default_dtype() is.
        super().__init__(in_features, out_features, bias, device, torch.float32)
        self.activation = activation
        self.precision = precision

    def __setattr__(self, name: str, value) -> None:
        # Activation and precision are checked when set, as by the
        # constructor, rather than first in the next forward.
        if name == "activation":
            value = _check_options(value, None)
        elif name == "precision":
            _check_options("none", value)
        if name in ("activation", "precision") and value is not None:
            # Held as a plain str: a subclass (an enum.StrEnum member) would
            # show as the enum in repr, and TorchScript types the attribute
            # from its class.
            value = str.__str__(value)
        super().__setattr__(name, value)
        if name in ("weight", "bias"):
            self._forget_stale_original()

    def _apply(self, *args, **kwargs):
        result = super()._apply(*args, **kwargs)
        self._forget_stale_original()
        return result

    def _forget_stale_original(self) -> None:
        # unswap_linear_ puts back the module swap_linear_ replaced (kept in
        # __dict__["_original_linear"]) only while it holds this module's very
        # Parameters. Once they are replaced (reassigned, load_state_dict with
        # assign=True, .to() while torch overwrites parameters on conversion),
        # the original would only keep the old tensors alive: a second copy of
        # the weight, possibly on another device.
        original = self.__dict__.get("_original_linear")
        if original is not None and any(original._parameters.get(name) is not self._parameters.get(name)
                                        for name in ("weight", "bias")):
            del self.__dict__["_original_linear"]

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        # `input`, nn.Linear's name: models call layer(input=h). The operator itself rather than the Python wrapper, so that
        # torch.jit.script can compile this module as it does nn.Linear. In
        # Python, the input is checked if the operator fails: nn.Linear takes
        # nested and sparse inputs, and a swapped layer's error must name the
        # layer and what the input is, not the dispatcher's ("Could not run
        # ... 'SparseCPU' backend").
        if torch.jit.is_scripting():
            return torch.ops.pygpukit.linear_tf32(input, self.weight, self.bias, self.activation,
                                                  precision=self.precision)
        return _linear_checked_on_failure(input, self.weight, self.bias, self.activation, self.precision)

    def extra_repr(self) -> str:
        extra = super().extra_repr()
        if self.activation != "none":
            extra += f", activation={self.activation!r}"
        if self.precision is not None:
            extra += f", precision={self.precision!r}"
        return extra

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, activation: Optional[str] = "none",
                    precision: Optional[str] = None) -> "TF32Linear":
        """Wrap `linear`'s very Parameter objects in a TF32Linear.

        Tied weights stay tied and optimizers holding the Parameters keep
        working. The new module computes nn.Linear's forward: a subclass's
        own forward is not run.

        Args:
            linear: the ``nn.Linear`` to stand in for.
            activation: the fused activation, as for the constructor.
            precision: as for the constructor.

        Returns:
            A new TF32Linear holding ``linear.weight`` and ``linear.bias``.

        Raises:
            ValueError: `linear` holds what the new module would not carry or
                cannot compute (lazy, parametrized or pruned weights, other
                parameters, buffers or children, module hooks, a dtype other
                than float32, a weight or bias not of nn.Linear's shapes), or
                an unknown activation or precision.
            TypeError: `linear` not an nn.Linear, or an activation or
                precision that is not a string (or None).

        Example:
            >>> layer = TF32Linear.from_linear(model.fc, activation="relu")
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"TF32Linear.from_linear: expected an nn.Linear, got {type(linear).__name__}")
        activation = _check_options(activation, precision, caller="TF32Linear.from_linear")
        reason = _unwrappable_reason(linear)
        if reason is not None:
            raise ValueError(f"TF32Linear.from_linear: cannot stand in for this {type(linear).__name__}: {reason}")
        return _around_same_parameters(cls, linear, activation=activation, precision=precision)

    def to_linear(self) -> nn.Linear:
        """Return a plain nn.Linear around the same Parameter objects.

        Returns:
            A new ``nn.Linear``; the fused activation, if any, is not part of it.

        Example:
            >>> linear = layer.to_linear()
        """
        return _around_same_parameters(nn.Linear, self)


@torch.jit.unused
def _linear_checked_on_failure(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                               activation: str, precision: Optional[str]) -> torch.Tensor:
    """TF32Linear's product; if it fails, an input that is not a dense,
    non-nested, unquantized tensor gets the error naming the layer and
    what x is."""
    return _checked_on_failure(
        lambda: _LINEAR_TF32(x, weight, bias, activation, precision=precision),
        lambda: _check_layer_args(x, weight, bias))


def _check_layer_args(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> None:
    """The input's kind, then the parameters' dtype: a model.half() or
    .to(dtype) after swap_linear_ converts a TF32Linear's parameters too, and
    the error must name the layer and the way out."""
    _check_wrapper_args("TF32Linear", None, input=x)
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None and param.dtype != torch.float32:
            raise RuntimeError(
                f"TF32Linear: its {name} is {param.dtype}, but the layer computes in float32 only (was the model "
                "converted, e.g. by .half() or .to(dtype), after swap_linear_?); call unswap_linear_(model) "
                "before converting it, or keep the swapped layers float32 (layer.float())")


def _around_same_parameters(cls, linear: nn.Linear, **attributes) -> nn.Linear:
    """An instance of `cls` (nn.Linear or a subclass) built without allocating
    parameters, holding `linear`'s own weight and bias Parameters, in the
    same train/eval mode, with `attributes` set on it."""
    new = cls.__new__(cls)
    nn.Module.__init__(new)
    new.in_features, new.out_features = linear.in_features, linear.out_features
    # Registered, as nn.Linear does (also a bias of None): a later plain
    # tensor assigned to either is then refused, not kept outside state_dict.
    new.register_parameter("weight", linear.weight)
    new.register_parameter("bias", linear.bias)
    for name, value in attributes.items():
        setattr(new, name, value)
    new.train(linear.training)
    return new


# ---- policy: which layers are worth swapping ----------------------------------------------------

# Layers with fewer weights (in_features * out_features) than this stay on
# torch. What the H200 measured (2026-11-30 to 2026-12-01; benchmarks/RESULTS.md
# and its git history): against torch in FP32, PyTorch's default, swapped layers win from M = 16
# tokens up (4096-14336 wide: 2.2-6.8x), and so does the MiniLM demo's whole
# model (384-1536 wide layers, 4.84 -> 4.02 ms per batch); against torch with
# TF32 enabled a 4096 -> 4096 layer with fused GELU runs at 1.32x at M = 1,
# 1.08x at M = 128 and 1.09x at M = 8192, a Llama-3-8B block at 1.08-1.43x
# at 1 token and 0.99-1.09x at 128 (2026-12-01). Below 128 x 128 nothing was measured, and launch overhead
# (tensor maps, split-K's second pass) dominates; the threshold is that
# judgement, not a measured crossover. The policy sees only the layer, not the
# number of tokens it will get.
MIN_SWAP_WEIGHT_ELEMENTS = 128 * 128


def default_policy(module: nn.Linear, fqn: str) -> Optional[str]:
    """The default swap policy: skip layers with fewer than ``MIN_SWAP_WEIGHT_ELEMENTS`` weights.

    Args:
        module: the candidate ``nn.Linear``.
        fqn: its fully qualified name in the model (unused).

    Returns:
        None to swap `module`, else the reason not to (small layers are not
        worth a custom kernel; see the comment on MIN_SWAP_WEIGHT_ELEMENTS).

    Example:
        >>> default_policy(nn.Linear(64, 64), "fc")
        'small layer (64 -> 64, 4096 weights < MIN_SWAP_WEIGHT_ELEMENTS = 16384)'
    """
    size = module.in_features * module.out_features
    if size < MIN_SWAP_WEIGHT_ELEMENTS:
        return (f"small layer ({module.in_features} -> {module.out_features}, {size} weights < "
                f"MIN_SWAP_WEIGHT_ELEMENTS = {MIN_SWAP_WEIGHT_ELEMENTS})")
    return None


# ---- mechanism ---------------------------------------------------------------------------------

@dataclass
class SwapReport:
    """What swap_linear_ did, by fully qualified module name.

    Attributes:
        swapped: every Linear replaced by a TF32Linear.
        fused: ``(name, activation)`` for the swapped layers that absorbed
            the activation module after them.
        skipped: ``(name, reason)`` for every Linear left alone.
        bypassable: ``(name, when)`` for swapped layers whose parent module
            does not always call them (e.g. ``nn.TransformerEncoderLayer``'s
            fused inference fast path reads their weights directly): those
            calls do not run on pygpukit.

    Example:
        >>> swap_linear_(model)
        >>> print(model.pygpukit_swap_report.summary())
    """

    swapped: List[str] = field(default_factory=list)
    fused: List[Tuple[str, str]] = field(default_factory=list)
    skipped: List[Tuple[str, str]] = field(default_factory=list)
    bypassable: List[Tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        """Summarize the report in one line.

        Returns:
            How many layers were swapped (and fused), how many skipped, and
            how many for each reason; ``repr(report)`` names them.
        """
        text = f"swapped {len(self.swapped)} nn.Linear layer(s)"
        if self.fused:
            text += f" ({len(self.fused)} with a fused activation)"
        text += f", skipped {len(self.skipped)}"
        reasons = collections.Counter(reason for _, reason in self.skipped)
        if reasons:
            text += ": " + "; ".join(f"{n} x {reason}" for reason, n in reasons.items())
        if self.bypassable:
            text += f"; {len(self.bypassable)} swapped layer(s) bypassed at times by their parent module"
        return text


# Every per-module hook dictionary a replacement module would not carry over:
# forward, backward and state-dict (save and load) hooks.
_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks",
               "_state_dict_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks",
               "_load_state_dict_post_hooks")


def _has_hooks(module: nn.Module) -> bool:
    return any(getattr(module, hooks, None) for hooks in _HOOK_DICTS)


# Activation modules that linear_tf32's epilogue computes identically; one
# with hooks or a forward set on the instance is not (fusing would drop them).
def _fusable_activation(module: Optional[nn.Module]) -> Optional[str]:
    if module is None or _has_hooks(module) or "forward" in vars(module):
        return None
    if type(module) is nn.ReLU:
        return "relu"
    if type(module) is nn.GELU:
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(module.approximate)
    if type(module) is nn.SiLU:
        return "silu"
    return None


# Modules whose forward uses a child Linear's weight without calling the
# child (torch's own code, not ours to change): why, by parent type. A
# Linear under one of the first kind never runs on pygpukit, so it is not
# swapped; under the second, swapped layers run on pygpukit except on the
# parent's fast path, which the report says.
_NEVER_CALLED_BY = {
    nn.MultiheadAttention: "nn.MultiheadAttention reads its out_proj weight directly and never calls it",
}
_SOMETIMES_BYPASSED_BY = {
    nn.TransformerEncoderLayer: "in eval mode without gradients nn.TransformerEncoderLayer may take its fused "
                                "fast path, which reads linear1/linear2 weights directly",
}


def _parent_reason(parent: Optional[nn.Module], table: Dict[type, str]) -> Optional[str]:
    """`table`'s entry for `parent`'s type, or None (also for no parent: the model itself)."""
    return next((why for cls, why in table.items() if isinstance(parent, cls)), None)


def _unswappable_reason(module: nn.Linear, swap_subclasses: bool) -> Optional[str]:
    """Why swap_linear_ leaves `module` alone, or None: what from_linear
    refuses (_unwrappable_reason), and an nn.Linear subclass (unless
    swap_subclasses) or a TF32Linear already."""
    if isinstance(module, TF32Linear):
        return "already a TF32Linear"
    lazy = isinstance(module.weight, nn.parameter.UninitializedParameter)
    if (not lazy and type(module) is not nn.Linear and not swap_subclasses
            and not nn.utils.parametrize.is_parametrized(module)):
        return (f"subclass {type(module).__name__} of nn.Linear: its forward may differ "
                "(swap_subclasses=True swaps it anyway)")
    return _unwrappable_reason(module)


def _unwrappable_reason(module: nn.Linear) -> Optional[str]:
    """Why a TF32Linear around `module`'s weight and bias Parameters would
    not compute what it does, or None: a lazy layer, state beyond those
    Parameters (_state_beyond_weight_and_bias), a dtype other than float32."""
    if isinstance(module.weight, nn.parameter.UninitializedParameter):
        return "lazy layer not materialized yet (run one forward pass first)"
    reason = _state_beyond_weight_and_bias(module)
    if reason is not None:
        return reason
    dtypes = {module.weight.dtype} | ({module.bias.dtype} if module.bias is not None else set())
    if dtypes != {torch.float32}:
        return f"parameters of dtype {', '.join(sorted(str(d) for d in dtypes))}, not float32"
    # F.linear also takes a 1-D weight and a bias that merely broadcasts;
    # linear_tf32 takes nn.Linear's shapes only.
    out_in = [module.out_features, module.in_features]
    bias_shape = None if module.bias is None else list(module.bias.shape)
    if list(module.weight.shape) != out_in or bias_shape not in (None, out_in[:1]):
        return (f"weight of shape {list(module.weight.shape)}"
                + ("" if bias_shape is None else f" and bias of shape {bias_shape}")
                + f", not [out_features, in_features] = {out_in} and [out_features]")
    return None


def _state_beyond_weight_and_bias(module: nn.Linear) -> Optional[str]:
    """Why a new module around `module`'s weight and bias Parameters would
    not carry all of its state, or None: a parametrization (pruning too),
    other parameters, buffers or children, a weight or bias that is not a
    Parameter, module hooks, or a forward set on the instance (as
    accelerate's device-map hooks do). Asked both ways: of an nn.Linear before
    swap_linear_ replaces it, of a TF32Linear before unswap_linear_ does."""
    parametrized = nn.utils.parametrize.is_parametrized(module)
    extra = {name for name, _ in module.named_parameters(recurse=False)}
    extra |= {name for name, _ in module.named_buffers(recurse=False)}
    extra = sorted((extra - {"weight", "bias"}) | {name for name, _ in module.named_children()})
    if parametrized:  # named by what is parametrized, not by the container holding the parametrizations
        extra = [f"a parametrization of {name}" for name in module.parametrizations] + [
            name for name in extra if name != "parametrizations"]
    else:
        # A weight computed by a hook, or a bias registered as a buffer (a
        # frozen bias): the TF32Linear would hold them as Parameters or plain
        # attributes, changing the state_dict and what .to() converts. (Not
        # asked of a parametrized module, a reason already, whose weight each
        # getattr would compute.)
        for name in ("weight", "bias"):
            value = getattr(module, name)
            if value is not None and not isinstance(value, nn.Parameter):
                extra.append(f"{name} not a Parameter")
    if extra:
        return (f"state beyond plain weight and bias Parameters ({', '.join(extra)}; "
                "e.g. weight_norm, pruning or a bias buffer)")
    if _has_hooks(module):
        return "has module hooks, which the module put in its place would not carry over"
    if "forward" in vars(module):
        return ("forward replaced on the instance (e.g. by accelerate's hooks), which the module put in its "
                "place would not carry over")
    return None


def _filter_keeps(filter_fn: FilterFn, module: nn.Module, fqn: str, caller: str) -> bool:
    """filter_fn's verdict, true to act on `module`. A string is refused: a
    policy returns a reason string to skip, where a filter's (truthy)
    string would swap, so a policy passed as a filter would invert the
    selection."""
    keep = filter_fn(module, fqn)
    if isinstance(keep, str):
        raise TypeError(f"{caller}: filter_fn must return true to swap or false to skip; it returned the string "
                        f"{keep!r} for {fqn or 'the model'!r} (a function returning None or a reason is a policy: "
                        "pass it as policy=)")
    return bool(keep)


# Why a Linear inside a TorchScript module (torch.jit.script or trace) stays:
# its submodules are compiled code, not the Python modules it was made from.
_SCRIPTED = "inside a TorchScript module (swap before torch.jit.script or torch.jit.trace)"


def _check_model(caller: str, model) -> None:
    """TypeError for a model whose layers the swap helpers cannot replace:
    not an nn.Module, or a TorchScript module (see _SCRIPTED)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"{caller}: model must be an nn.Module, got {type(model).__name__}")
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError(f"{caller}: model is a TorchScript module ({type(model).__name__}), whose layers cannot "
                        f"be replaced; swap before torch.jit.script or torch.jit.trace (scripted models with "
                        f"swapped layers work)")


def _check_callable(caller: str, name: str, fn, returns: str) -> None:
    """TypeError for a filter_fn or policy that is not a function (a string
    would otherwise fail inside the walk as "'str' object is not callable")."""
    if fn is not None and not callable(fn):
        raise TypeError(f"{caller}: {name} must be a function (module, fqn) -> {returns} or None, "
                        f"got {type(fn).__name__}")


def swap_linear_(model: nn.Module, *, filter_fn: Optional[FilterFn] = None, activation_fusion: bool = False,
                 precision: Optional[str] = None, policy: Optional[Policy] = default_policy,
                 swap_subclasses: bool = False) -> nn.Module:
    """Replace, in place, the ``nn.Linear`` modules of `model` with TF32Linear modules around the same Parameters.

    Walks any nesting (``nn.Sequential``, ``nn.ModuleList``,
    ``nn.ModuleDict``, `model` itself). A Linear is skipped, with the reason
    in the report, if a TF32Linear could not reproduce it (a lazy layer, a
    subclass unless `swap_subclasses`, extra state or hooks, a replaced
    ``forward``, non-float32 parameters or shapes other than nn.Linear's),
    if it would never run (``nn.MultiheadAttention``'s ``out_proj``), if it
    lies inside a TorchScript module, or if `filter_fn` or `policy` rejects
    it. Skips of the first kinds raise one ``UserWarning``. The full rules,
    activation fusion, the meta device and bypassed layers:
    docs/linear_layers.md.

    Args:
        model: any module; it is modified in place.
        filter_fn: ``(module, fqn) -> bool``, true to swap (a string raises
            TypeError: a policy's reason would read the other way round).
        activation_fusion: if True, a swapped Linear directly followed by
            ``nn.ReLU``, ``nn.GELU`` or ``nn.SiLU`` in an ``nn.Sequential``
            takes that activation into its epilogue, and the activation
            module becomes ``nn.Identity`` (assumes the Sequential is called
            as a whole).
        precision: the new modules' precision (see matmul_tf32).
        policy: ``(module, fqn) -> None`` to swap or a non-empty reason
            string to skip; default :func:`default_policy` (skips layers of
            fewer than ``MIN_SWAP_WEIGHT_ELEMENTS`` = 128 x 128 weights);
            ``None`` swaps every eligible layer.
        swap_subclasses: also swap subclasses of nn.Linear (their own
            forward, if any, is then not used; a warning names each).

    Returns:
        `model`, or the new TF32Linear when `model` itself is a swapped
        Linear. A :class:`SwapReport` is logged (INFO, summary) and stored as
        ``pygpukit_swap_report`` on the returned module. A Linear reachable
        under several names is replaced by one shared TF32Linear.

    Raises:
        ValueError: an unknown precision.
        TypeError: a model that is not an nn.Module or is a TorchScript
            module, a precision that is not a string, a filter_fn or policy
            that is not callable, a filter_fn that returns a string, or a
            policy that returns something other than None or a non-empty
            string.
        Whatever `filter_fn` or `policy` raises. In every case the model is
        left as it was: layers already swapped are put back.

    Example:
        >>> model = nn.Sequential(nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 512)).cuda()
        >>> swap_linear_(model, activation_fusion=True).pygpukit_swap_report.summary()
        'swapped 2 nn.Linear layer(s) (1 with a fused activation), skipped 0'
    """
    _check_model("swap_linear_", model)
    _check_callable("swap_linear_", "filter_fn", filter_fn, "bool")
    _check_callable("swap_linear_", "policy", policy, "Optional[str]")
    _check_options("none", precision, caller="swap_linear_")
    report = SwapReport()
    unexpected: Dict[str, List[str]] = {}  # reason -> fqns, for skips the caller did not choose
    replacements: Dict[Tuple[int, str], nn.Module] = {}
    visited = set()
    undo: List[Tuple[nn.Module, str, nn.Module]] = []  # (parent, name, module it held), in order

    def replace(parent: nn.Module, name: str, new: nn.Module) -> None:
        undo.append((parent, name, parent._modules[name]))
        setattr(parent, name, new)

    def swap(module: nn.Linear, fqn: str, activation: str = "none",
             parent: Optional[nn.Module] = None) -> nn.Module:
        """`module` itself if it is to be skipped (and why is reported), else
        its TF32Linear (one per Linear and activation)."""
        # A Linear its parent never calls is named as such first: no flag
        # makes swapping it useful (MultiheadAttention's out_proj is also a
        # subclass, whose hint would suggest swap_subclasses=True).
        reason = _parent_reason(parent, _NEVER_CALLED_BY)
        if reason is None:
            reason = _unswappable_reason(module, swap_subclasses)
        chosen = False  # skipped by the caller's filter_fn or policy
        if reason is None and filter_fn is not None and not _filter_keeps(filter_fn, module, fqn, "swap_linear_"):
            reason, chosen = "excluded by filter_fn", True
        if reason is None and policy is not None:
            chosen = True
            reason = policy(module, fqn)
            if reason is not None and not (isinstance(reason, str) and reason):
                raise TypeError(f"swap_linear_: policy must return None (swap) or a non-empty reason string "
                                f"(skip); it returned {reason!r} for {fqn or 'the model'!r}")
        if reason is not None:
            report.skipped.append((fqn, reason))
            if not chosen and not isinstance(module, TF32Linear):
                unexpected.setdefault(reason, []).append(fqn or "the model itself")
            return module
        bypass = _parent_reason(parent, _SOMETIMES_BYPASSED_BY)
        if bypass is not None:
            report.bypassable.append((fqn, bypass))
        if type(module).forward is not nn.Linear.forward:
            # Only reachable with swap_subclasses=True: say what is dropped.
            log.warning("pygpukit swap_linear_: %r is a %s with its own forward, which the TF32Linear does not "
                        "run (it computes nn.Linear's)", fqn, type(module).__name__)
        key = (id(module), activation)
        if key not in replacements:
            new = TF32Linear.from_linear(module, activation=activation, precision=precision)
            # Kept outside _modules (no state_dict or named_modules entry), so
            # that unswap_linear_ puts this very module back: its class,
            # attributes and identity, not just its Parameters.
            new.__dict__["_original_linear"] = module
            replacements[key] = new
        report.swapped.append(fqn)
        return replacements[key]

    def convert(module: nn.Module, fqn: str) -> nn.Module:
        # A container registered in several places is converted once.
        if id(module) in visited:
            return module
        visited.add(id(module))
        # _modules, not named_children(): a Linear registered twice in one
        # container must be replaced at each place (named_children lists it once).
        names = [name for name, child in module._modules.items() if child is not None]
        fusing = activation_fusion and type(module) is nn.Sequential
        for name, next_name in zip(names, names[1:] + [None]):
            child, child_fqn = module._modules[name], f"{fqn}.{name}" if fqn else name
            if isinstance(child, torch.jit.ScriptModule):
                scripted = [f"{child_fqn}.{sub_fqn}" if sub_fqn else child_fqn
                            for sub_fqn, sub in child.named_modules()
                            if getattr(sub, "original_name", None) == "Linear"]
                report.skipped += [(name, _SCRIPTED) for name in scripted]
                if scripted:
                    unexpected.setdefault(_SCRIPTED, []).extend(scripted)
                continue
            if not isinstance(child, nn.Linear):
                new = convert(child, child_fqn)
            else:
                act_module = module._modules[next_name] if fusing and next_name is not None else None
                activation = _fusable_activation(act_module)
                new = swap(child, child_fqn, activation or "none", parent=module)
                if activation is not None and new is not child:
                    # The activation module is kept on the Identity that
                    # takes its place, outside _modules (no new state_dict
                    # or named_modules entry), so that unswap_linear_ puts
                    # the very same module back into this slot (one shared
                    # Linear may be fused in several places).
                    identity = nn.Identity()
                    identity.train(act_module.training)  # as in the module it replaces
                    identity.__dict__["_unfused_activation"] = act_module
                    replace(module, next_name, identity)
                    report.fused.append((child_fqn, activation))
            if new is not child:
                replace(module, name, new)
        return module

    if isinstance(model, nn.Linear):
        model = swap(model, "")
    else:
        try:
            convert(model, "")
        except BaseException:
            # A filter_fn or policy that raised: put back every module that
            # was already replaced, so that the model is as it was.
            for parent, name, old in reversed(undo):
                parent._modules[name] = old
            raise
    log.info("pygpukit swap_linear_: %s", report.summary())
    if unexpected:
        count = sum(len(names) for names in unexpected.values())
        warnings.warn(f"swap_linear_: {count} Linear layer{'s' if count > 1 else ''} left unswapped, running on "
                      f"torch instead: " + "; ".join(
                          f"{len(names)} for {reason} ({', '.join(map(repr, names[:3]))}"
                          f"{', ...' if len(names) > 3 else ''})" for reason, names in unexpected.items()),
                      stacklevel=2)
    if report.bypassable:
        log.warning("pygpukit swap_linear_: swapped layers that their parent module may bypass (those calls do "
                    "not run on pygpukit): %s", "; ".join(f"{fqn}: {why}" for fqn, why in report.bypassable))
    model.pygpukit_swap_report = report
    return model


def unswap_linear_(model: nn.Module, *, filter_fn: Optional[FilterFn] = None) -> nn.Module:
    """Put back the modules that swap_linear_ replaced.

    In place of every :class:`TF32Linear` in `model` (those for which
    ``filter_fn(module, fqn)`` is true, if given) goes the very module
    swap_linear_ replaced, or, for a TF32Linear it did not create or whose
    Parameters were reassigned since, a plain ``nn.Linear`` around its
    Parameters; fused activation modules return in place of their
    ``nn.Identity``. A TF32Linear is kept, with a logged warning, when its
    activation has no matching module to restore or when it holds state
    the restored module would drop (a parametrization, pruning, other
    parameters or buffers, module hooks). The ``pygpukit_swap_report`` on
    `model` is removed. More in docs/linear_layers.md.

    Args:
        model: the swapped module; it is modified in place.
        filter_fn: ``(module, fqn) -> bool``, true to restore that layer.

    Returns:
        `model`, or the new nn.Linear when `model` itself is a TF32Linear.

    Raises:
        TypeError: a model that is not an nn.Module or is a TorchScript
            module, or a filter_fn that is not callable or returns a string
            (see swap_linear_).

    Example:
        >>> unswap_linear_(swap_linear_(model))
    """
    _check_model("unswap_linear_", model)
    _check_callable("unswap_linear_", "filter_fn", filter_fn, "bool")
    replacements: Dict[int, nn.Module] = {}
    model.__dict__.pop("pygpukit_swap_report", None)

    def restore(module: TF32Linear, fqn: str, parent: Optional[nn.Module], next_name: Optional[str]) -> nn.Module:
        if filter_fn is not None and not _filter_keeps(filter_fn, module, fqn, "unswap_linear_"):
            return module
        # E.g. pruning, a parametrization or a hook added after the swap.
        reason = _state_beyond_weight_and_bias(module)
        if reason is not None:
            log.warning("pygpukit unswap_linear_: kept TF32Linear %r: %s", fqn, reason)
            return module
        if module.activation != "none":
            following = parent._modules.get(next_name) if parent is not None else None
            unfused = following.__dict__.get("_unfused_activation") if type(following) is nn.Identity else None
            if unfused is None:
                log.warning("pygpukit unswap_linear_: kept TF32Linear %r with activation %r: no activation "
                            "module to restore", fqn, module.activation)
                return module
            fused = _fusable_activation(unfused)
            if fused != module.activation:
                log.warning("pygpukit unswap_linear_: kept TF32Linear %r: its activation is %r, but the module "
                            "fused into it computes %r (the activation was changed after the swap)", fqn,
                            module.activation, fused)
                return module
            unfused.train(module.training)
            setattr(parent, next_name, unfused)
        if id(module) not in replacements:
            original = module.__dict__.get("_original_linear")
            # The original, unless its Parameters were replaced meanwhile.
            same = original is not None and original.weight is module.weight and original.bias is module.bias
            replacements[id(module)] = original if same else module.to_linear()
            replacements[id(module)].train(module.training)
        return replacements[id(module)]

    visited = set()

    def convert(module: nn.Module, fqn: str) -> nn.Module:
        # A container registered in several places (or, through a reference
        # back to a parent, inside itself) is converted once.
        if id(module) in visited:
            return module
        visited.add(id(module))
        names = [name for name, child in module._modules.items() if child is not None]
        for name, next_name in zip(names, names[1:] + [None]):
            child, child_fqn = module._modules[name], f"{fqn}.{name}" if fqn else name
            if isinstance(child, TF32Linear):
                new = restore(child, child_fqn, module if type(module) is nn.Sequential else None, next_name)
            else:
                new = convert(child, child_fqn)
            if new is not child:
                setattr(module, name, new)
        return module

    if isinstance(model, TF32Linear):
        return restore(model, "", None, None)
    return convert(model, "")


@contextlib.contextmanager
def swapped_linear(model: nn.Module, **swap_kwargs) -> Iterator[nn.Module]:
    """Swap `model`'s Linear layers for the duration of a ``with`` block.

    On exit (exceptions included) exactly the modules it swapped are
    restored; TF32Linear modules that existed before are left as they were.

    Args:
        model: the module to swap.
        **swap_kwargs: passed to :func:`swap_linear_`.

    Returns:
        (as the ``with`` target) `model`, or the new module when `model` is
        itself a Linear.

    Raises:
        What :func:`swap_linear_` raises, before the body runs.

    Example:
        >>> with swapped_linear(model, filter_fn=lambda m, fqn: "lm_head" not in fqn) as m:
        ...     y = m(x)
    """
    _check_model("swapped_linear", model)
    before = {id(m) for m in model.modules() if isinstance(m, TF32Linear)}
    swapped = swap_linear_(model, **swap_kwargs)
    try:
        yield swapped
    finally:
        unswap_linear_(swapped, filter_fn=lambda module, fqn: id(module) not in before)
