"""``nn.Linear`` on pygpukit's TF32 matmul, and a helper that swaps a model's
Linear layers for it (a first version: the fused bias/activation epilogue,
activation fusion and the size policy come with the linear_tf32 op).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import torch
from torch import nn

from .ops import matmul_tf32

log = logging.getLogger(__name__)


class TF32Linear(nn.Linear):
    """Drop-in ``nn.Linear`` whose product runs on ``pygpukit::matmul_tf32``.

    Same parameters (``weight[out_features, in_features]``, optional
    ``bias[out_features]``), same ``state_dict`` keys and ``repr``, so a
    checkpoint loads into either class. The weight is read in place as the
    column-major right operand (``weight.mT``), never copied.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = matmul_tf32(x, self.weight.mT)
        return y + self.bias if self.bias is not None else y

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "TF32Linear":
        """A TF32Linear around the very same Parameter objects as `linear`
        (tied weights stay tied; optimizers holding them keep working)."""
        return _around_same_parameters(cls, linear)

    def to_linear(self) -> nn.Linear:
        """A plain nn.Linear around the same Parameter objects."""
        return _around_same_parameters(nn.Linear, self)


def _around_same_parameters(cls, linear: nn.Linear) -> nn.Linear:
    """An instance of `cls` (nn.Linear or a subclass) built without allocating
    parameters, holding `linear`'s own weight and bias Parameters."""
    new = cls.__new__(cls)
    nn.Module.__init__(new)
    new.in_features, new.out_features = linear.in_features, linear.out_features
    new.weight = linear.weight
    new.bias = linear.bias
    new.train(linear.training)
    return new


@dataclass
class SwapReport:
    """What swap_linear_ did: fully qualified names swapped, and skipped with why."""

    swapped: List[str] = field(default_factory=list)
    skipped: List[Tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        return f"swapped {len(self.swapped)} nn.Linear layer(s), skipped {len(self.skipped)}"


def _skip_reason(module: nn.Linear) -> Optional[str]:
    if isinstance(module.weight, nn.parameter.UninitializedParameter):
        return "lazy layer not materialized yet"
    if type(module) is not nn.Linear:
        return f"subclass {type(module).__name__} of nn.Linear (only exact nn.Linear is swapped)"
    if module.weight.device.type == "meta":
        return "parameters on the meta device"
    if module.weight.dtype != torch.float32:
        return f"weight dtype {module.weight.dtype}, not float32"
    return None


def swap_linear_(model: nn.Module, *, filter_fn: Optional[Callable[[nn.Module, str], bool]] = None
                 ) -> nn.Module:
    """Replaces, in place, every exact ``nn.Linear`` in `model` for which
    ``filter_fn(module, fqn)`` is true (all by default) with a
    :class:`TF32Linear` sharing its Parameters; returns the model (the new
    module if `model` itself is a Linear). The report is logged and kept as
    ``model.pygpukit_swap_report`` (a :class:`SwapReport`).
    """
    report = SwapReport()

    def convert(module: nn.Module, fqn: str) -> nn.Module:
        if isinstance(module, nn.Linear) and not isinstance(module, TF32Linear):
            reason = _skip_reason(module)
            if reason is None and filter_fn is not None and not filter_fn(module, fqn):
                reason = "excluded by filter_fn"
            if reason is not None:
                report.skipped.append((fqn, reason))
                return module
            report.swapped.append(fqn)
            return TF32Linear.from_linear(module)
        for name, child in module.named_children():
            new = convert(child, f"{fqn}.{name}" if fqn else name)
            if new is not child:
                setattr(module, name, new)
        return module

    model = convert(model, "")
    log.info("pygpukit swap_linear_: %s", report.summary())
    model.pygpukit_swap_report = report
    return model


def unswap_linear_(model: nn.Module) -> nn.Module:
    """Puts plain ``nn.Linear`` back around the same Parameters; returns the model."""
    if isinstance(model, TF32Linear):
        return model.to_linear()
    for name, child in model.named_children():
        new = unswap_linear_(child)
        if new is not child:
            setattr(model, name, new)
    return model
