"""Shared helpers: devices to run on, the accuracy bounds, poisoned outputs."""

import inspect
import math
import os

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import pygpukit_torch
from pygpukit_torch.testing import rel_error

HAS_CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
requires_two_gpus = pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2,
                                       reason="needs two CUDA GPUs")
DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]

# (device, kernel) pairs for the correctness tests: the CPU path, and on CUDA
# the dispatcher's choice plus every kernel family forced. A test that takes a
# `kernel` parameter runs under pygpukit_torch.force_kernel(kernel) (see
# _forced_kernel below) and is skipped where that kernel cannot run.
CUDA_KERNELS = ["auto", "wgmma", "wgmma_swap_ab", "mma_sync", "skinny"]
DEVICE_KERNELS = [pytest.param("cpu", "auto", id="cpu")] + [
    pytest.param("cuda", k, id=f"cuda-{k}", marks=requires_cuda) for k in CUDA_KERNELS]


def kernel_runs_here(kernel: str) -> bool:
    """Whether a forced `kernel` really runs on this GPU (the dispatcher falls
    back to its own choice otherwise, which would only repeat 'auto'). The
    probe is x @ w.T, with one row of x for the skinny (decode) kernel, and
    x @ w for wgmma_swap_ab (which runs only that layout)."""
    x = torch.empty(1 if kernel in ("skinny", "gemv") else 512, 512, device="cuda")
    w = torch.empty(512, 512, device="cuda")
    with pygpukit_torch.force_kernel(kernel):
        return is_kernel(pygpukit_torch.kernel_info(x, w if kernel == "wgmma_swap_ab" else w.t()), kernel)


def is_kernel(info: str, kernel: str) -> bool:
    """Whether kernel_info's `info` names the forced `kernel`'s family (for
    3xTF32, the kernel after "3xTF32 (how it splits) on ")."""
    if info.startswith("3xTF32"):
        info = info.split(") on ", 1)[-1]
    return "swap AB" in info if kernel == "wgmma_swap_ab" else info.startswith(kernel)


def _forced_kernel_of(item) -> str:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("kernel", "auto") if callspec else "auto"


@pytest.fixture(autouse=True)
def _forced_kernel(request):
    kernel = _forced_kernel_of(request.node)
    if kernel == "auto":
        yield
        return
    if not kernel_runs_here(kernel):
        pytest.skip(f"the {kernel} kernel does not run on this GPU or build")
    with pygpukit_torch.force_kernel(kernel):
        yield


class _ForcedKernelRecorder(TorchDispatchMode):
    """Counts the pygpukit products a test runs on CUDA and how many of
    them the forced kernel ran (by kernel_info of the operands: the
    dispatcher falls back to its automatic choice on a problem the forced
    kernel cannot run, silently). kernel_info is asked after the call, so
    that any copy it makes cannot take the NaN-poisoned block meant for the
    output. While a dispatch mode is active torch.compile runs the function
    eagerly: a compile test does not belong under a forced kernel."""

    def __init__(self, kernel: str):
        super().__init__()
        self.kernel, self.products, self.forced = kernel, 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "_schema", None) and func._schema.name
        if name in ("pygpukit::matmul_tf32", "pygpukit::linear_tf32") and self._on_cuda(args):
            # linear_tf32(x, weight, bias, activation, precision) is x @ weight.T.
            a, b = args[0], args[1] if name == "pygpukit::matmul_tf32" else args[1].mT
            slot = 2 if name == "pygpukit::matmul_tf32" else 4
            precision = args[slot] if len(args) > slot else kwargs.get("precision")
            out = func(*args, **kwargs)  # raises first on bad arguments
            self.products += 1
            self.forced += is_kernel(pygpukit_torch.kernel_info(a, b, precision=precision), self.kernel)
            return out
        return func(*args, **kwargs)

    @staticmethod
    def _on_cuda(args) -> bool:
        return (len(args) >= 2 and all(isinstance(t, torch.Tensor) and t.is_cuda for t in args[:2])
                and not torch.cuda.is_current_stream_capturing())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Under a forced kernel, records whether it ran any of the test's
    products; a test whose every product fell back to the automatic choice
    only repeats the "auto" case, and is reported as skipped (below)."""
    kernel = _forced_kernel_of(item)
    item.forced_kernel_unused = None  # a rerun starts afresh
    if kernel == "auto" or not torch.cuda.is_available():
        yield
        return
    with _ForcedKernelRecorder(kernel) as recorder:
        yield
    if recorder.products and not recorder.forced:
        item.forced_kernel_unused = (f"the forced {kernel} kernel ran none of the test's {recorder.products} "
                                     f"products (it cannot run these shapes; the automatic choice did)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    reason = getattr(item, "forced_kernel_unused", None)
    # A pass only (an xfail test that passed keeps its own outcome).
    if reason and report.when == "call" and report.passed and not hasattr(report, "wasxfail"):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), (item.location[1] or 0) + 1, f"Skipped: {reason}")


# The environment variables that change the dispatcher's choice, each with
# the values (stripped, lower case) that change it from the default.
_DISPATCH_ENV = {
    "PYGPUKIT_STREAM_K": lambda v: v == "0",
    "PYGPUKIT_KERNEL": lambda v: v not in ("", "auto"),
    "PYGPUKIT_PRECISION": lambda v: v not in ("", "tf32"),
    "PYGPUKIT_ALLOW_TF32": lambda v: v in ("0", "false", "no", "off"),
}


def skip_unless_path_taken(taken: bool, why_not: str) -> None:
    """Skips a test of a path that the dispatcher chooses by the GPU's SM
    count or shared memory (stream-K's partial last wave, split-K, a tile
    size) where it does not take it, except on a 132-SM Hopper GPU (H100
    SXM, H200: what the tests' shapes were chosen on), where not taking it
    is the regression the test is there to catch and fails it. It skips
    there too under an environment variable that changes the choice on
    purpose (PYGPUKIT_STREAM_K=0, a forced kernel or default precision)."""
    if taken:
        return
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    steered = [v for v, steers in _DISPATCH_ENV.items() if steers(os.environ.get(v, "").strip().lower())]
    if (props.major, props.minor, props.multi_processor_count) == (9, 0, 132) and not steered:
        pytest.fail(why_not)
    pytest.skip(why_not + (f" (under {', '.join(steered)})" if steered else ""))


def skip_unless_config_fits(info: str, expected: str, kernel: str) -> None:
    """Skips a test of a forced mma_sync tile configuration (`kernel`) whose
    call fell back (kernel_info `info` does not start with `expected`)
    because the GPU has less shared memory per block than Hopper's 227 KB:
    the 128x256 and 128x128 tiles need ~160 and ~144 KB, more than sm_86 /
    sm_89 offer. On a GPU with Hopper's shared memory a fallback fails the
    test's own assertion instead."""
    if info.startswith(expected):
        return
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    optin = getattr(props, "shared_memory_per_block_optin", None)  # absent from older torch
    if optin is not None and optin < 227 * 1024:
        pytest.skip(f"{kernel} does not fit this GPU's {optin // 1024} KB of shared memory per block")


def matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact-enough reference: the float64 product of the same inputs."""
    return torch.matmul(a.double(), b.double())


def error_bound(a: torch.Tensor, b: torch.Tensor, precision: str = "tf32") -> torch.Tensor:
    """Elementwise bound on |out - ref| that any correct kernel meets.

    tf32: each input rounded to nearest at 10 mantissa bits contributes at
    most 2^-11 relative error, so a product at most 2^-10 (+ tiny), and FP32
    accumulation over K adds at most about K·2^-24 per term; the issue's
    bound (2^-10 + (K+16)·2^-22)·(|a| @ |b|) leaves a 4x margin on the latter.
    ieee: the same without the input rounding term.
    tf32x3: the split leaves at most ~3·2^-22 relative per product (the
    dropped small·small term and the TF32 rounding of the two small parts),
    bounded here by 2^-19, and the FP32 accumulation runs over 3K terms.
    """
    k = a.shape[-1]
    terms = 3 * k if precision == "tf32x3" else k
    rounding = {"tf32": 2.0 ** -10, "tf32x3": 2.0 ** -19, "ieee": 0.0}[precision]
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


def norm_diff(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ in float64."""
    return float((out.detach().double() - ref.detach().double()).norm())


def poison_next_output(shape, device) -> None:
    """Fill with NaN the block the caching allocator hands out next for a
    float32 tensor of `shape`, so that unwritten output elements show up."""
    if device != "cuda" or math.prod(shape) == 0:
        return
    torch.full(shape, float("nan"), device=device)  # freed at once, block reused next


def neg_bit_view(x: torch.Tensor) -> torch.Tensor:
    """x's values as a view with ATen's negative bit set (what `z.conj().imag`
    returns): the view reads the negation of the memory it points to."""
    view = torch._neg_view(-x)
    assert view.is_neg()
    return view


def aligned_rows(r: int, k: int) -> torch.Tensor:
    """A [r, k] CUDA matrix whose rows start 16 bytes apart even for odd k (what
    the decode kernels need): a view of [r, k rounded up to 4], contiguous
    when k % 4 == 0."""
    return torch.randn(r, (k + 3) // 4 * 4, device="cuda")[:, :k]


def poisoned_matmul(a, b, precision=None):
    """matmul_tf32 with its output memory NaN-poisoned beforehand (on CUDA)."""
    out_shape = torch.matmul(torch.empty(a.shape, device="meta"), torch.empty(b.shape, device="meta")).shape
    poison_next_output(out_shape, a.device.type)
    return pygpukit_torch.matmul_tf32(a, b, precision=precision)


def assert_within(out, ref, bound_fn, norm_bound_fn=None) -> None:
    """out is a contiguous float32 tensor of ref's shape with every element
    within bound_fn() (called only when there are elements) of ref, and,
    where ref is finite, ‖out − ref‖ within norm_bound_fn() if given."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert out.dtype == torch.float32
    assert out.is_contiguous()
    if ref.numel() == 0:
        return
    assert not out.isnan().any(), "NaN in output: an element was not written"
    err = (out.double() - ref).abs()
    bound = bound_fn()
    bad = err > bound
    assert not bad.any(), (
        f"{int(bad.sum())} of {bad.numel()} elements exceed the bound; worst excess "
        f"{float((err - bound).max()):.3g}, max err {float(err.max()):.3g}")
    if norm_bound_fn is not None and bool(ref.isfinite().all()):
        diff, norm_bound = norm_diff(out, ref), norm_bound_fn()
        assert diff <= norm_bound, (f"‖out − ref‖ = {diff:.3g} exceeds {norm_bound:.3g} "
                                    f"(‖out − ref‖/‖ref‖ = {rel_error(out, ref):.3g})")


def assert_matmul_close(out, a, b, precision: str = "tf32") -> None:
    """out meets error_bound elementwise and norm_error_bound in norm."""
    ref = matmul_reference(a, b)

    def norm_bound():
        rounded = norm_diff(matmul_reference(round_tf32(a), round_tf32(b)), ref) if precision == "tf32" else 0.0
        return norm_error_bound(a.shape[-1], precision, product_scale(a, b, ref), rounded)

    assert_within(out, ref, lambda: error_bound(a, b, precision), norm_bound)


ACTIVATIONS = {
    "none": lambda z: z,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
    "silu": F.silu,
}
# max |act'|: GELU's derivative peaks at 1.129 (both forms), SiLU's at 1.100.
ACTIVATION_LIPSCHITZ = {"none": 1.0, "relu": 1.0, "gelu": 1.13, "gelu_tanh": 1.13, "silu": 1.1}


def linear_reference(x, weight, bias, activation: str = "none") -> torch.Tensor:
    """act(F.linear) of the same inputs in float64."""
    z = F.linear(x.double(), weight.double(), None if bias is None else bias.double())
    return ACTIVATIONS[activation](z)


def assert_linear_close(out, x, weight, bias, activation: str = "none", precision: str = "tf32") -> None:
    """out meets the matmul bound carried through the activation.

    The pre-activation z may be off by error_bound (plus the FP32 rounding
    of the bias addition); an activation with |act'| <= L moves that by at
    most L times, and its own FP32 evaluation (erff, tanhf, expf: a few ulp,
    on terms of size |z|) adds 2^-20·|z|.
    """
    def bound():
        z_bound = error_bound(x, weight.mT, precision)
        if bias is not None:
            z_bound = z_bound + 2.0 ** -22 * bias.double().abs()
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
            scale = max(scale, float((product + bias.double()).norm()))
        return (norm_error_bound(x.shape[-1], precision, ACTIVATION_LIPSCHITZ[activation] * scale, rounded)
                + 2.0 ** -20 * float(ref.norm()))

    assert_within(out, ref, bound, norm_bound)


# opcheck's tolerance (atol, rtol) for outputs and gradients by precision.
# Eager mode and AOTDispatcher may hand the same product to the op in other
# layouts (a gradient's strides, say), and the dispatcher's choice depends on
# layout: at a few rows a TF32 product runs the FP32 GEMV in one layout and a
# TF32 tensor-core kernel in another, so the two agree to TF32's rounding
# (~1e-3 of each term; |terms| <= ~5 for these randn inputs), not float32's
# default 1.3e-6. A wrong formula is off by O(1) and still fails.
OPCHECK_TOLERANCE = {"tf32": (5e-3, 2e-3), "tf32x3": (1e-5, 1e-5), "ieee": (None, None)}


def opcheck(op, args, kwargs=None):
    """torch.library.opcheck at the tolerance of the call's precision (the
    default "tf32" unless kwargs name another) on CUDA; on the CPU, whose
    emulation does not depend on layout, and on torch releases whose opcheck
    takes no tolerance, at opcheck's default."""
    atol, rtol = OPCHECK_TOLERANCE[(kwargs or {}).get("precision") or "tf32"]
    on_cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in args)
    if not on_cuda or "atol" not in inspect.signature(torch.library.opcheck).parameters:
        atol = rtol = None
    tolerance = {} if atol is None else {"atol": atol, "rtol": rtol}
    torch.library.opcheck(op, args, kwargs, **tolerance)
