"""Shared helpers: devices to run on, the accuracy bounds, poisoned outputs."""

import inspect
import math
import os

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import pygpukit_torch
from pygpukit_torch import testing
from pygpukit_torch.testing import (ACTIVATION_LIPSCHITZ, ACTIVATIONS, error_bound, linear_reference,  # noqa: F401
                                    matmul_reference, norm_diff, norm_error_bound, product_scale, rel_error,
                                    round_tf32, tf32x3_norm_bound)

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
    the 256x128 and 4-stage 128x128 tiles need 144 and 128 KB, more than
    sm_86 / sm_89 offer. On a GPU with Hopper's shared memory a fallback fails the
    test's own assertion instead."""
    if info.startswith(expected):
        return
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    optin = getattr(props, "shared_memory_per_block_optin", None)  # absent from older torch
    if optin is not None and optin < 227 * 1024:
        pytest.skip(f"{kernel} does not fit this GPU's {optin // 1024} KB of shared memory per block")


class DispatchCounter(TorchDispatchMode):
    """Records the name of every operator dispatched inside the block
    (e.g. "pygpukit.linear_tf32.default") in `ops`."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def routing_operands(device):
    """Operands for one product of each kind the routing tests send: batched
    a [3, 40, 64] and b [3, 64, 24], an addmm input m [40, 24], a linear
    weight w [24, 64] and its bias [24]."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 40, 64, generator=g).to(device), torch.randn(3, 64, 24, generator=g).to(device)
    m, bias = torch.randn(40, 24, generator=g).to(device), torch.randn(24, generator=g).to(device)
    return a, b, m, torch.randn(24, 64, generator=g).to(device), bias


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


def assert_matmul_close(out, a, b, precision: str = "tf32") -> None:
    """pygpukit_torch.testing.assert_matmul_close, and out contiguous (what the ops return)."""
    assert out.is_contiguous()
    testing.assert_matmul_close(out, a, b, precision=precision)


def assert_linear_close(out, x, weight, bias, activation: str = "none", precision: str = "tf32") -> None:
    """pygpukit_torch.testing.assert_linear_close, and out contiguous."""
    assert out.is_contiguous()
    testing.assert_linear_close(out, x, weight, bias, activation, precision=precision)


# opcheck's tolerance (atol, rtol) for outputs and gradients by precision.
# Eager mode and AOTDispatcher may hand the same product to the op in other
# layouts (a gradient's strides, say), and the dispatcher's choice depends on
# layout: at a few rows a TF32 product runs the FP32 GEMV in one layout and a
# TF32 tensor-core kernel in another, so the two agree to TF32's rounding
# (~1e-3 of each term; |terms| <= ~5 for these randn inputs), not float32's
# default 1.3e-6. A wrong formula is off by O(1) and still fails.
OPCHECK_TOLERANCE = {"tf32": (5e-3, 2e-3), "tf32x3": (1e-5, 1e-5), "fp32": (1e-5, 1e-5), "ieee": (None, None)}


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
