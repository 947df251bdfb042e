"""Helpers for comparing pygpukit's ops with torch in tests and benchmarks:
assert_matmul_close, assert_linear_close and assert_model_close for pytest
(tolerances from the products' error model), rel_error, matmul_errors,
cublas_tf32.
The bounds are explained in docs/testing.md."""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .ops import PRECISIONS


@contextlib.contextmanager
def cublas_tf32(enabled: bool):
    """Run torch.matmul on CUDA with TF32 on or off inside a ``with`` block.

    The caller's setting is restored on exit. Uses
    ``torch.backends.cuda.matmul.fp32_precision`` where it exists: once it
    is set, the legacy ``allow_tf32`` getter raises.

    Args:
        enabled: True for cuBLAS TF32, False for FP32.

    Example:
        >>> with cublas_tf32(True):
        ...     ref = a @ b  # cuBLAS TF32
    """
    mm = torch.backends.cuda.matmul
    new_api = hasattr(mm, "fp32_precision")
    if new_api:
        old, mm.fp32_precision = mm.fp32_precision, "tf32" if enabled else "ieee"
    else:
        old, mm.allow_tf32 = mm.allow_tf32, enabled
    try:
        yield
    finally:
        if new_api:
            mm.fp32_precision = old
        else:
            mm.allow_tf32 = old


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Return the relative error ‖out − ref‖ / ‖ref‖ (Frobenius norms), computed in float64.

    Computed outside autograd.

    Args:
        out: the result to check.
        ref: the reference, of the same shape.

    Returns:
        The relative error; for a zero or empty `ref`, 0.0 where `out`
        equals it and inf where it does not (0/0 would be NaN, and
        ``rel_error(...) < tol`` then fails on a correct result).

    Raises:
        ValueError: `out` and `ref` of different shapes (broadcasting one
            against the other would hide a wrong-shaped result).
        TypeError: a complex tensor (converting it to float64 would drop its
            imaginary part).

    Example:
        >>> rel_error(pygpukit_torch.matmul_tf32(a, b), a.double() @ b.double())  # ~3e-4
    """
    if out.shape != ref.shape:
        raise ValueError(f"rel_error: out has shape {list(out.shape)} but ref has shape {list(ref.shape)}")
    for name, t in (("out", out), ("ref", ref)):
        if t.is_complex():
            raise TypeError(f"rel_error: {name} is complex ({t.dtype}); it compares real tensors")
    ref = ref.detach().double()
    diff, norm = float((out.detach().double() - ref).norm()), float(ref.norm())
    if norm == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / norm


ACTIVATIONS = {
    "none": lambda z: z,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
    "silu": F.silu,
}
# max |act'|: GELU's derivative peaks at 1.129 (both forms), SiLU's at 1.100.
ACTIVATION_LIPSCHITZ = {"none": 1.0, "relu": 1.0, "gelu": 1.13, "gelu_tanh": 1.13, "silu": 1.1}

def matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact-enough reference: the float64 product of the same inputs."""
    return torch.matmul(a.detach().double(), b.detach().double())


def error_bound(a: torch.Tensor, b: torch.Tensor, precision: str = "tf32") -> torch.Tensor:
    """Elementwise bound on |out - ref| that any correct kernel meets.

    tf32: each input rounded to nearest at 10 mantissa bits contributes at
    most 2^-11 relative error, so a product at most 2^-10 (+ tiny), and FP32
    accumulation over K adds at most about K·2^-24 per term; the bound
    (2^-10 + (K+16)·2^-22)·(|a| @ |b|) leaves a 4x margin on the latter.
    ieee and fp32: the same without the input rounding term.
    tf32x3: the split leaves at most ~3·2^-22 relative per product (the
    dropped small·small term and the TF32 rounding of the two small parts),
    bounded here by 2^-19, and the FP32 accumulation runs over 3K terms.
    """
    k = a.shape[-1]
    terms = 3 * k if precision == "tf32x3" else k
    rounding = {"tf32": 2.0 ** -10, "tf32x3": 2.0 ** -19, "fp32": 0.0, "ieee": 0.0}[precision]
    rel = (terms + 16) * 2.0 ** -22 + rounding
    return rel * torch.matmul(a.double().abs(), b.double().abs())


def round_tf32(t: torch.Tensor) -> torch.Tensor:
    """t rounded to TF32 as the kernels do: to nearest, ties away from zero
    (finite values; those within half a TF32 step of FLT_MAX round to inf,
    as on the GPU)."""
    return ((t.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def tf32x3_norm_bound(k: int) -> float:
    """What the GPU's 3xTF32 reaches in norm, ‖out − ref‖/‖ref‖, on random
    inputs: the split leaves ~2^-22 per product (the small parts' TF32
    rounding, the dropped small·small term), and the tensor cores' FP32
    accumulation, which is not rounded to nearest, adds an error that grows
    with the length of one accumulation chain. Measured on the H200 with
    promotion every 4 k-tiles (wgmma and mma.sync paths): 2.8e-7–3.4e-7 at
    K=256, 3.6e-7–3.7e-7 from K=4096 to 8192; without it (one 3K-long chain)
    it was 9.6e-6 at K=4096 and 1.9e-5 at K=8192 (this bound: 3.1e-5 and
    6.1e-5); plain TF32 3e-4. Capped at 2^-13 = 1.2e-4 (reached at K ≈
    16k), 40% of plain TF32's error, so that a large K cannot let plain
    TF32 pass as 3xTF32."""
    return min(2.0 ** -21 + k * 2.0 ** -27, 2.0 ** -13)


def product_scale(a: torch.Tensor, b: torch.Tensor, product: torch.Tensor) -> float:
    """max(‖a @ b‖, ‖√(a² @ b²)‖) in float64, given `product`, the caller's
    float64 a @ b: what the error of a product scales with. Rounding each
    term a_ik·b_kj (TF32 inputs, 3xTF32's split, FP32 accumulation of
    zero-mean terms) moves each output by about √(Σ_k a_ik² b_kj²) times
    the unit error, however much the terms cancel; with partial sums that
    grow (inputs of one sign) the accumulation error scales with the output
    itself."""
    a, b = a.detach().double(), b.detach().double()
    return max(float(product.norm()), float(torch.matmul(a * a, b * b).sqrt().norm()))


def norm_error_bound(k: int, precision: str, scale: float, rounded_diff: float = 0.0) -> float:
    """Bound on ‖out − ref‖ for a product over `k` of `scale`
    (product_scale), beside error_bound's elementwise worst case, which
    grows with K while the real error grows with √K (a 1% error passed it at
    K = 4096).

    tf32: the error of rounding the inputs to TF32 (`rounded_diff`: ‖the
    float64 product of the rounded inputs − ref‖) with a 25% margin, plus
    the FP32 accumulation's, about √K·2^-24·scale on random inputs, allowed
    8 times over (the tensor cores' accumulation is not rounded to nearest).
    Truncating instead of rounding gives ~2.6x the rounding error; bfloat16
    inputs ~8x. Both are statistics over many outputs: with fewer than ~16
    the rounding error is a few random draws and the check tells little.
    With inputs of one sign at large K the accumulation term, which then
    scales with ‖a @ b‖ (partial sums that grow), exceeds even bfloat16's
    rounding error: the check, too, then tells little (no test multiplies
    such inputs). ieee: the accumulation term alone. tf32x3:
    tf32x3_norm_bound·scale. Inputs that TF32 rounding takes to inf (within
    half a step of FLT_MAX) have no norm bound: inf.
    """
    accumulation = math.sqrt(max(k, 1)) * 2.0 ** -21 * scale
    if precision == "tf32":
        return 1.25 * rounded_diff + accumulation if math.isfinite(rounded_diff) else math.inf
    if precision == "tf32x3":
        return tf32x3_norm_bound(k) * scale
    return accumulation


class MatmulErrors(NamedTuple):
    """The errors of a product against its float64 reference (:func:`matmul_errors`)."""

    norm: float  # ‖out − ref‖ / ‖ref‖ over the entries where ref is finite
    worst: float  # max |out − ref| / (|a| @ |b|) there: the worst element, relative to its own scale
    nonfinite_match: bool  # out is NaN where ref is, and the same infinity where ref is infinite


def matmul_errors(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> MatmulErrors:
    """Measure how far ``out`` is from the float64 product ``a @ b``, norm-wise and element by element.

    For comparing methods (``torch.matmul`` in FP32 against a pygpukit
    precision, say) on the same inputs; :func:`assert_matmul_close` asserts a
    bound instead.

    Args:
        out: the computed product, ``torch.matmul(a, b)``'s shape.
        a: the left operand as given to the product.
        b: the right operand.

    Returns:
        A :class:`MatmulErrors` (norm, worst, nonfinite_match). An entry
        that is finite in the reference but not in ``out`` makes norm and
        worst NaN or inf, so ``<=`` comparisons fail.

    Example:
        >>> ours = matmul_errors(pygpukit_torch.matmul_tf32(a, b, precision="fp32"), a, b)
        >>> theirs = matmul_errors(torch.matmul(a, b), a, b)
        >>> ours.norm <= theirs.norm and ours.worst <= theirs.worst
        True
    """
    ref = matmul_reference(a, b)
    finite = torch.isfinite(ref)
    out64 = out.detach().double()
    infinite = ~finite & ~torch.isnan(ref)
    nonfinite_match = bool(torch.equal(torch.isnan(out64), torch.isnan(ref)) and
                           torch.equal(out64[infinite], ref[infinite]))
    diff = torch.where(finite, out64 - ref, torch.zeros_like(ref))
    ref_finite = torch.where(finite, ref, torch.zeros_like(ref))
    scale = torch.matmul(a.detach().double().nan_to_num(0.0, 0.0, 0.0).abs(),
                         b.detach().double().nan_to_num(0.0, 0.0, 0.0).abs())
    ref_norm = float(ref_finite.norm())
    norm = float(diff.norm()) / ref_norm if ref_norm > 0 else float(diff.norm())
    worst = float((diff.abs() / scale.clamp_min(1e-300)).max()) if diff.numel() else 0.0
    return MatmulErrors(norm, worst, nonfinite_match)


def norm_diff(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ in float64."""
    return float((out.detach().double() - ref.detach().double()).norm())



def linear_reference(x, weight, bias, activation: str = "none") -> torch.Tensor:
    """act(F.linear) of the same inputs in float64."""
    z = F.linear(x.double(), weight.double(), None if bias is None else bias.double())
    return ACTIVATIONS[activation](z)


def _fail(what: str, lines) -> None:
    raise AssertionError("\n".join([what] + [line for line in lines if line]))


def _assert_within(out: torch.Tensor, ref: torch.Tensor, bound_fn, norm_bound_fn, what: str) -> None:
    """Raises AssertionError, in the style of torch.testing.assert_close,
    where `out` (float32, ref's shape) differs from the float64 `ref` by
    more than bound_fn() elementwise (where ref is NaN or infinite, out must
    equal it; where ref is beyond float32's range, the infinity of its sign
    passes) or, where ref and out are all finite, ‖out − ref‖ > norm_bound_fn()."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{what}: out must be a tensor, got {type(out).__name__}")
    if out.shape != ref.shape:
        _fail(f"{what}: the shapes do not match.", [f"out: {list(out.shape)}, expected: {list(ref.shape)}"])
    if out.dtype != torch.float32:
        _fail(f"{what}: out is {out.dtype}, expected torch.float32.", [])
    if ref.numel() == 0:
        return
    out64, ref = out.detach().double().cpu(), ref.detach().cpu()
    err = (out64 - ref).abs()
    bound = bound_fn().cpu()
    finite = ref.isfinite()
    # A non-finite reference must be matched exactly (NaN by NaN): its bound
    # is infinite too. A finite one within a bound's reach of float32's
    # largest value may come out as the infinity of its sign.
    close = torch.where(finite, err <= bound, (out64 == ref) | (out64.isnan() & ref.isnan()))
    close |= (finite & out64.isinf() & (out64.sign() == ref.sign())
              & (ref.abs() + bound > torch.finfo(torch.float32).max))
    bad = ~close
    count = int(bad.sum())
    norm_line = ""
    # The norm check where both are finite throughout (out's infinities
    # have passed or failed elementwise above).
    if bool(finite.all()) and bool(out64.isfinite().all()) and norm_bound_fn is not None:
        diff, norm_bound = float((out64 - ref).norm()), norm_bound_fn()
        ref_norm = float(ref.norm())
        rel = diff / ref_norm if ref_norm > 0 else (0.0 if diff == 0 else math.inf)
        rel_bound = norm_bound / ref_norm if ref_norm > 0 else 0.0
        norm_line = f"Norm error ‖out − ref‖/‖ref‖: {rel:.3g} (allowed {rel_bound:.3g})"
        if diff > norm_bound and count == 0:
            _fail(f"{what}: the norm error exceeds the bound (each element is within its own).",
                  [norm_line, "A systematic error does this: a result computed at a lower precision than the "
                              "one named (tf32 checked as tf32x3, say), or inputs truncated instead of rounded "
                              "to TF32."])
    if count:
        excess = torch.where(bad, (err - bound).nan_to_num(nan=math.inf), torch.full_like(err, -math.inf))
        flat = int(excess.flatten().argmax())
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), ref.shape))
        _fail(f"{what}: tensor-likes are not close!", [
            f"Mismatched elements: {count} / {ref.numel()} ({100.0 * count / ref.numel():.1f}%)",
            f"Greatest excess at index {index}: out = {float(out64[index]):.9g}, float64 reference = "
            f"{float(ref[index]):.9g}, |difference| = {float(err[index]):.3g} (allowed {float(bound[index]):.3g})",
            norm_line])


def _check_precision(what: str, precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"{what}: precision must be one of {', '.join(map(repr, PRECISIONS))}, got {precision!r}")


def assert_matmul_close(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, precision: str = "tf32") -> None:
    """Assert that `out` is ``a @ b`` as ``matmul_tf32`` at `precision` computes it.

    The reference is the float64 product of the same inputs; the tolerance
    comes from the product's error model, not from fixed atol/rtol: each
    element within (input rounding + (K + 16)·2^-22)·(|a| @ |b|) of it
    (input rounding 2^-10 for ``"tf32"``, 2^-19 for ``"tf32x3"``, 0 for
    ``"ieee"`` and ``"fp32"``; K tripled under ``"tf32x3"``), and the whole within a norm
    bound that grows with √K: for ``"tf32"`` 1.25 times the error of
    rounding the inputs to TF32 to nearest, so a kernel that truncates them
    fails (docs/testing.md). Use it where
    ``torch.testing.assert_close(out, a @ b)`` fails on TF32's expected error.

    Args:
        out: the product to check (float32, ``torch.matmul(a, b)``'s shape).
        a, b: the float32 operands (any device; broadcasting as in torch.matmul).
        precision: ``"tf32"``, ``"tf32x3"``, ``"fp32"`` or ``"ieee"``: the
            precision out was computed at.

    Raises:
        AssertionError: `out` is not close, naming the mismatched elements,
            the worst one (index, values, allowed difference) and the norm
            error, as torch.testing.assert_close does.
        ValueError: an unknown precision.

    Example:
        >>> a, b = torch.randn(128, 64), torch.randn(64, 256)
        >>> assert_matmul_close(pygpukit_torch.matmul_tf32(a, b), a, b)
    """
    what = f"assert_matmul_close(precision={precision!r})"
    _check_precision(what, precision)
    ref = matmul_reference(a, b)

    def norm_bound():
        rounded = norm_diff(matmul_reference(round_tf32(a), round_tf32(b)), ref) if precision == "tf32" else 0.0
        return norm_error_bound(a.shape[-1], precision, product_scale(a, b, ref), rounded)

    _assert_within(out, ref, lambda: error_bound(a, b, precision), norm_bound, what)


def assert_linear_close(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                        activation: Optional[str] = "none", *, precision: str = "tf32") -> None:
    """Assert that `out` is ``act(F.linear(x, weight, bias))`` as ``linear_tf32`` computes it.

    The matmul bound of :func:`assert_matmul_close`, carried through the
    activation: an activation with |act'| <= L moves the pre-activation's
    error by at most L times, and its own FP32 evaluation adds 2^-20·|z|;
    the bias addition adds 2^-22·|bias|.

    Args:
        out: the result to check.
        x, weight, bias: the operands, as for ``F.linear``.
        activation: ``"none"``, ``"relu"``, ``"gelu"``, ``"gelu_tanh"`` or ``"silu"``.
        precision: as for :func:`assert_matmul_close`.

    Raises:
        AssertionError: `out` is not close (see :func:`assert_matmul_close`).
        ValueError: an unknown precision or activation.

    Example:
        >>> x, w, b = torch.randn(32, 64), torch.randn(16, 64), torch.randn(16)
        >>> assert_linear_close(pygpukit_torch.linear_tf32(x, w, b, "gelu"), x, w, b, "gelu")
    """
    what = f"assert_linear_close(activation={activation!r}, precision={precision!r})"
    _check_precision(what, precision)
    activation = "none" if activation is None else activation  # as linear_tf32 takes it
    if activation not in ACTIVATIONS:
        raise ValueError(f"{what}: activation must be one of {', '.join(map(repr, ACTIVATIONS))}")

    def bound():
        z_bound = error_bound(x, weight.mT, precision)
        if bias is not None:
            z_bound = z_bound + 2.0 ** -22 * bias.detach().double().abs()
        if activation == "none":
            return z_bound
        return (ACTIVATION_LIPSCHITZ[activation] * z_bound
                + 2.0 ** -20 * linear_reference(x, weight, bias).abs())

    ref = linear_reference(x, weight, bias, activation)

    def norm_bound():
        rounded = (norm_diff(linear_reference(round_tf32(x), round_tf32(weight), bias, activation), ref)
                   if precision == "tf32" else 0.0)
        # The pre-activation's scale, with its errors carried through the
        # activation (scaled by its Lipschitz constant; the rounding term
        # already went through it), and the activation's own FP32
        # evaluation: a few ulp of its output.
        product = linear_reference(x, weight, None)
        scale = product_scale(x, weight.mT, product)
        if bias is not None:
            scale = max(scale, float((product + bias.detach().double()).norm()))
        return (norm_error_bound(x.shape[-1], precision, ACTIVATION_LIPSCHITZ[activation] * scale, rounded)
                + 2.0 ** -20 * float(ref.norm()))

    _assert_within(out, ref, bound, norm_bound, what)


#: Default norm tolerances of assert_model_close, by precision.
MODEL_RTOL = {"tf32": 1e-2, "tf32x3": 1e-5, "fp32": 1e-5, "ieee": 1e-5}


def _flatten(x, path="output"):
    if isinstance(x, torch.Tensor):
        yield path, x
    elif isinstance(x, dict):
        for k in sorted(x, key=repr):  # the keys' order is not compared
            yield from _flatten(x[k], f"{path}[{k!r}]")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _flatten(v, f"{path}[{i}]")
    else:
        yield path, x


def assert_model_close(model: nn.Module, reference: nn.Module, *inputs, precision: str = "tf32",
                       rtol: Optional[float] = None, **kwargs) -> None:
    """Assert that a model whose products run on pygpukit's ops matches its original.

    Runs ``model(*inputs, **kwargs)`` and ``reference(*inputs, **kwargs)``
    (no gradients) and compares every floating-point tensor of the outputs
    (tensors, or tuples, lists and dicts of them) by the norm error
    ‖out − ref‖/‖ref‖, computed in float64. A model's error depends on its
    depth and conditioning, not only on its products' error model, so the
    tolerance is a norm bound: `rtol`, or by default ``MODEL_RTOL[precision]``
    (1e-2 for ``"tf32"``, 1e-5 for the others). For single
    products use :func:`assert_matmul_close`, whose bounds are exact.

    Args:
        model: the swapped model (e.g. after :func:`pygpukit_torch.swap_linear_`).
        reference: the original (e.g. a ``copy.deepcopy`` taken before swapping).
        *inputs, **kwargs: what both are called with.
        precision: the precision `model` runs at (chooses the default rtol).
        rtol: the largest norm error allowed for each output.

    Raises:
        AssertionError: the outputs differ in structure, shape or dtype, or
            an output's norm error exceeds the tolerance (naming the output,
            its norm error and its worst element).

    Example:
        >>> original = copy.deepcopy(model)
        >>> pygpukit_torch.swap_linear_(model)
        >>> assert_model_close(model, original, torch.randn(8, 128, device="cuda"))
    """
    what = f"assert_model_close(precision={precision!r})"
    _check_precision(what, precision)
    tol = MODEL_RTOL[precision] if rtol is None else rtol
    with torch.no_grad():
        outs, refs = list(_flatten(model(*inputs, **kwargs))), list(_flatten(reference(*inputs, **kwargs)))
    if [p for p, _ in outs] != [p for p, _ in refs]:
        _fail(f"{what}: the outputs differ in structure.",
              [f"model: {[p for p, _ in outs]}", f"reference: {[p for p, _ in refs]}"])
    for (path, out), (_, ref) in zip(outs, refs):
        if not isinstance(out, torch.Tensor) or not isinstance(ref, torch.Tensor):
            if type(out) is not type(ref) or out != ref:
                _fail(f"{what}: {path} differs.", [f"model: {out!r}, reference: {ref!r}"])
            continue
        if out.shape != ref.shape or out.dtype != ref.dtype:
            _fail(f"{what}: {path} differs.", [f"model: {out.dtype} {list(out.shape)}, "
                                                f"reference: {ref.dtype} {list(ref.shape)}"])
        if not out.is_floating_point():
            if not torch.equal(out, ref):
                _fail(f"{what}: {path} (not floating point) differs.", [])
            continue
        # Elements that are NaN or infinite in both alike are equal; the
        # norm error is that of the others.
        same = (out == ref) | (out.isnan() & ref.isnan())
        keep = ~(same & ~ref.isfinite())
        err = rel_error(out[keep], ref[keep])
        if not err <= tol:
            diff = (out.detach().double() - ref.detach().double()).abs().cpu()
            flat = int(diff.nan_to_num(nan=math.inf).flatten().argmax())
            index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), ref.shape))
            _fail(f"{what}: {path} is not close!", [
                f"Norm error ‖out − ref‖/‖ref‖: {err:.3g} (allowed {tol:.3g})",
                f"Greatest difference at index {index}: model = {float(out[index]):.9g}, "
                f"reference = {float(ref[index]):.9g}"])


class LlamaBlock(nn.Module):
    """A Llama-style decoder block built from plain ``nn.Linear`` (no bias):
    pre-RMSNorm causal attention with q/k/v/o projections (grouped-query
    when kv_heads < heads) and a gated SiLU MLP (gate/up/down). Rotary
    embeddings are left out: they touch no Linear layer.
    Llama-3-8B's sizes: dim=4096, heads=32, kv_heads=8, hidden=14336.

    Shapes: x ``[batch, tokens, dim]`` -> ``[batch, tokens, dim]``.
    """

    def __init__(self, dim: int = 256, heads: int = 4, kv_heads: int = 4, hidden: int = 512):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.attn_norm, self.mlp_norm = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.attn_norm(x)
        q = self.q_proj(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = (p(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2).repeat_interleave(
            self.heads // self.kv_heads, dim=1) for p in (self.k_proj, self.v_proj))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, d))
        h = self.mlp_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))
