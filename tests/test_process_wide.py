"""pygpukit_torch.enable_globally: the process-wide switch that routes
float32 products to the ops through torch's own aten operators."""

import copy
import math
import threading

import pytest
import torch
import torch.nn.functional as F

import pygpukit_torch
from pygpukit_torch import process_wide
from pygpukit_torch.testing import LlamaBlock, rel_error
from conftest import DEVICES, requires_cuda, routing_operands


@pytest.fixture(autouse=True)
def _switch_off_afterwards():
    yield
    pygpukit_torch.disable_globally()


def tf32_rounded(out, reference) -> bool:
    """out has TF32's error against the float64 reference, not FP32's."""
    return 1e-5 < rel_error(out, reference) < 2e-3


@pytest.mark.parametrize("device", DEVICES)
def test_routes_each_kind_of_product_in_every_thread(device):
    a, b, m, w, bias = routing_operands(device)
    ab = a.double() @ b.double()
    calls = {
        "matmul": (lambda: torch.matmul(a, b), ab),
        "mm": (lambda: torch.mm(a[0], b[0]), ab[0]),
        "matmul 3-D by 2-D": (lambda: a @ b[0], a.double() @ b[0].double()),
        "addmm": (lambda: torch.addmm(m, a[0], b[0], beta=0.5, alpha=2.0), 0.5 * m.double() + 2.0 * ab[0]),
        "baddbmm": (lambda: torch.baddbmm(m, a, b), m.double() + ab),
        "linear": (lambda: F.linear(a, w, bias), F.linear(a.double(), w.double(), bias.double())),
        "einsum": (lambda: torch.einsum("bij,bjk->bik", a, b), ab),
    }
    stats = pygpukit_torch.enable_globally(devices=(device,))
    assert pygpukit_torch.enabled_globally()
    for name, (call, reference) in calls.items():
        taken = stats.taken
        out = call()
        assert stats.taken == taken + 1 and not stats.passed, (name, stats)
        assert out.dtype == torch.float32 and tf32_rounded(out, reference), name
    results = []
    thread = threading.Thread(target=lambda: results.append(a @ b))
    thread.start()
    thread.join()
    assert stats.taken == len(calls) + 1 and tf32_rounded(results[0], ab)
    pygpukit_torch.disable_globally()
    assert not pygpukit_torch.enabled_globally()
    assert torch.equal(a @ b, torch.matmul(a, b)) and stats.taken == len(calls) + 1  # torch's own again
    if device == "cpu":  # torch's FP32 (TF32 is off by default for CUDA matmuls as well)
        assert rel_error(a @ b, ab) < 1e-6


def test_the_fused_bias_is_linear_tf32_and_other_inputs_broadcast():
    x, w, bias = torch.randn(5, 16), torch.randn(8, 16), torch.randn(8)
    expected = pygpukit_torch.linear_tf32(x, w, bias)
    product = pygpukit_torch.matmul_tf32(x, w.T)
    nan = torch.full((5, 8), float("nan"))
    stats = pygpukit_torch.enable_globally(devices="cpu")
    assert torch.equal(F.linear(x, w, bias), expected)
    assert torch.equal(torch.addmm(bias[None], x, w.T), expected)
    assert torch.equal(torch.addmm(nan, x, w.T, beta=0), product)  # torch's rule: beta = 0 ignores NaN
    column = torch.randn(5, 1)
    assert torch.allclose(torch.addmm(column, x, w.T, alpha=3, beta=2), 2 * column + 3 * product)
    assert torch.allclose(torch.addmm(torch.tensor(1.5), x, w.T), product + 1.5)
    assert stats.taken == 5 and not stats.passed


@pytest.mark.parametrize("device", DEVICES)
def test_leaves_what_it_cannot_take_to_torch(device):
    a, b = torch.randn(8, 16, device=device), torch.randn(16, 4, device=device)
    out, reference = torch.empty(8, 4, device=device), a.double() @ b.double()
    bad = {}
    for name, call in {"mm": lambda: torch.mm(a, b.T), "bmm": lambda: torch.bmm(a, b),
                       "addmm": lambda: torch.addmm(torch.zeros(3, device=device), a, b)}.items():
        with pytest.raises(RuntimeError) as error:
            call()
        bad[name] = str(error.value)
    stats = pygpukit_torch.enable_globally(devices=(device,))
    assert torch.equal(a.double() @ b.double(), torch.mm(a.double(), b.double()))
    assert torch.equal(torch.mm(a, b, out=out), out)  # out=: not overridden, not counted
    assert rel_error(out, reference) < 1e-6
    half = torch.float16 if device == "cuda" else torch.bfloat16
    assert (a.to(half) @ b.to(half)).dtype == half
    for name, call in {"mm": lambda: torch.mm(a, b.T), "bmm": lambda: torch.bmm(a, b),
                       "addmm": lambda: torch.addmm(torch.zeros(3, device=device), a, b)}.items():
        with pytest.raises(RuntimeError) as error:
            call()
        assert str(error.value) == bad[name]  # torch's own error, word for word
    assert stats.taken == 0
    assert stats.passed == {"torch.float64 operands": 2, f"{half} operands": 1,
                            "mm operands that are not 2-D and matching": 1,
                            "bmm operands that are not 3-D and matching": 1,
                            "an addmm input that does not broadcast to the product": 1}, stats.passed


def test_gradients_run_on_the_ops_and_match_the_scope():
    torch.manual_seed(0)
    block = LlamaBlock(dim=64, heads=4, kv_heads=2, hidden=128)
    x = torch.randn(2, 8, 64, requires_grad=True)
    x64 = x.detach().double().requires_grad_()
    copy.deepcopy(block).double()(x64).sum().backward()
    with pygpukit_torch.enable(devices="cpu") as scoped:
        block(x).sum().backward()
    grad_scoped, x.grad = x.grad, None
    stats = pygpukit_torch.enable_globally(devices="cpu")
    out = block(x)
    forward = stats.taken
    out.sum().backward()
    # The seven projections, as in the scope; in backward each needs two
    # products (input and weight gradients).
    assert forward == scoped.taken == 7 and stats.taken == 3 * forward, (scoped.taken, stats.taken)
    assert tf32_rounded(x.grad, x64.grad) and rel_error(x.grad, grad_scoped) < 2e-3


def test_precision_argument_and_default_precision_blocks():
    a, b = torch.randn(32, 300), torch.randn(300, 16)
    ref = a.double() @ b.double()
    pygpukit_torch.enable_globally("tf32x3", devices="cpu")
    assert torch.equal(a @ b, pygpukit_torch.matmul_tf32(a, b, precision="tf32x3"))
    with pygpukit_torch.default_precision("tf32"):  # the switch's own precision holds
        assert rel_error(a @ b, ref) < 1e-6
    pygpukit_torch.enable_globally(devices="cpu")  # None: the operators' default at each call
    assert tf32_rounded(a @ b, ref)
    with pygpukit_torch.default_precision("ieee"):
        assert torch.equal(a @ b, pygpukit_torch.matmul_tf32(a, b, precision="ieee"))


def test_calling_again_replaces_and_disable_is_idempotent():
    a = torch.randn(4, 4)
    first = pygpukit_torch.enable_globally(devices="cpu")
    a @ a
    second = pygpukit_torch.enable_globally(devices=("cpu", "cpu"))
    a @ a
    assert (first.taken, second.taken) == (1, 1)
    pygpukit_torch.disable_globally()
    pygpukit_torch.disable_globally()
    a @ a
    assert (first.taken, second.taken) == (1, 1)


def test_the_scope_takes_products_first_and_compiled_graphs_follow_their_backend():
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    stats = pygpukit_torch.enable_globally(devices="cpu")
    with pygpukit_torch.enable(devices="cpu") as scoped:
        a @ b
    assert (scoped.taken, stats.taken) == (1, 0)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, y: (x @ y).relu(), backend="aot_eager")
    assert torch.equal(compiled(a, b), pygpukit_torch.matmul_tf32(a, b).relu()) and stats.taken == 1


def test_bad_arguments_raise():
    for bad in ("meta", ("cuda", "xpu"), (), "cpus", 3, b"cpu", [0]):
        with pytest.raises(ValueError, match="devices"):
            pygpukit_torch.enable_globally(devices=bad)
    with pytest.raises(ValueError, match="unknown precision 'tf16'"):
        pygpukit_torch.enable_globally("tf16")
    with pytest.raises(TypeError):
        pygpukit_torch.enable_globally(32)
    assert not pygpukit_torch.enabled_globally()
    if not pygpukit_torch.built_with_cuda:
        with pytest.raises(ValueError, match="no CUDA kernels"):
            pygpukit_torch.enable_globally()


def test_a_failed_enable_leaves_the_switch_as_it_was(monkeypatch):
    """Another library holding one of the operators for a key: RuntimeError,
    and the switch keeps its settings (a stand-in key whose registration
    fails, so nothing is registered for it)."""
    a = torch.randn(4, 4)
    stats = pygpukit_torch.enable_globally(devices="cpu")
    monkeypatch.setitem(process_wide._DISPATCH_KEYS, "meta", "Meta")
    real_impl = torch.library.Library.impl

    def impl(self, name, fn, key="", **kwargs):
        if key == "Meta":
            raise RuntimeError("already overridden")
        return real_impl(self, name, fn, key, **kwargs)

    monkeypatch.setattr(torch.library.Library, "impl", impl)
    with pytest.raises(RuntimeError, match="cannot override aten::mm for the Meta key, so the switch is left"):
        pygpukit_torch.enable_globally(devices=("cpu", "meta"))
    a @ a
    assert pygpukit_torch.enabled_globally() and stats.taken == 1


def test_in_place_products_and_torch_scalar_rules():
    a, b, c = torch.randn(6, 16), torch.randn(16, 5), torch.randn(6, 5)
    batch_a, batch_b, batch_c = torch.randn(2, 6, 16), torch.randn(2, 16, 5), torch.randn(2, 6, 5)
    product, batched = pygpukit_torch.matmul_tf32(a, b), pygpukit_torch.matmul_tf32(batch_a, batch_b)
    # Whether an infinite alpha yields NaNs depends on the CPU's BLAS: the
    # contract is torch's own result, whatever it is.
    infinite_alpha = torch.addmm(c, a, b, alpha=math.inf)
    stats = pygpukit_torch.enable_globally(devices="cpu")
    out = c.clone()
    assert out.addmm_(a, b, beta=0.5, alpha=2) is out and torch.allclose(out, 0.5 * c + 2 * product)
    out = batch_c.clone()
    assert out.baddbmm_(batch_a, batch_b) is out and torch.allclose(out, batch_c + batched)
    out = torch.full((6, 5), float("nan"))
    assert torch.equal(out.addmm_(a, b, beta=0), product)  # beta = 0: the NaN is ignored
    assert torch.equal(torch.addmm(c, a, b, beta=True, alpha=True), c + product)  # bools count as 1 and 0
    assert stats.taken == 4 and not stats.passed
    # What torch keeps, with its own results: K = 0 (the input's signed
    # zeros), alpha = 0 (neither operand read), alpha or beta not finite or
    # not real, an in-place input the product would broadcast into.
    negative_zero = torch.full((2,), -0.0)
    assert torch.equal(1 / torch.addmm(negative_zero, torch.zeros(2, 0), torch.zeros(0, 2)),
                       torch.full((2, 2), -math.inf))
    infinite = torch.full((6, 16), math.inf)
    assert torch.equal(torch.addmm(c, infinite, b, alpha=0), c)
    torch.testing.assert_close(torch.addmm(c, a, b, alpha=math.inf), infinite_alpha, rtol=0, atol=0, equal_nan=True)
    with pytest.raises(RuntimeError):
        torch.addmm(c, a, b, alpha=1j)
    with pytest.raises(RuntimeError, match=r"Bad in-place call: input tensor size \[5\] and output tensor size "
                                           r"\[6, 5\] should match"):
        torch.zeros(5).addmm_(a, b)
    assert stats.taken == 4 and sum(stats.passed.values()) == 5, stats.passed


def test_turning_it_off_and_on_while_other_threads_multiply():
    """Toggled 200 times while four threads multiply: no errors, and each
    product is either torch's or the ops' result, bitwise."""
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    theirs, ours = torch.matmul(a, b), pygpukit_torch.matmul_tf32(a, b)
    stop, problems = threading.Event(), []

    def multiply():
        while not stop.is_set():
            try:
                out = a @ b
                if not (torch.equal(out, theirs) or torch.equal(out, ours)):
                    problems.append("a result that is neither torch's nor the ops'")
            except Exception as error:  # noqa: BLE001 (any failure is the finding)
                problems.append(repr(error))

    workers = [threading.Thread(target=multiply) for _ in range(4)]
    for worker in workers:
        worker.start()
    try:
        for i in range(200):
            pygpukit_torch.enable_globally("ieee" if i % 2 else None, devices="cpu")
            pygpukit_torch.disable_globally()
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert not problems, problems[:3]


@requires_cuda
def test_a_cuda_graph_captures_the_routed_product():
    a, b = torch.randn(256, 512, device="cuda"), torch.randn(512, 128, device="cuda")
    expected = pygpukit_torch.matmul_tf32(a, b)
    stats = pygpukit_torch.enable_globally()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = a @ b
    pygpukit_torch.disable_globally()
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert stats.taken == 1 and torch.equal(out, expected)


def test_torch_func_transforms_run_on_the_ops():
    x, w = torch.randn(3, 4), torch.randn(6, 4)
    stats = pygpukit_torch.enable_globally(devices="cpu")
    grad = torch.func.grad(lambda t: (t @ w.T).sum())(x)
    batched = torch.vmap(lambda t: t @ w.T)(torch.randn(5, 3, 4))
    assert torch.allclose(grad, w.sum(0).expand(3, 4), atol=1e-2) and batched.shape == (5, 3, 6)
    assert stats.taken == 3 and not stats.passed  # forward and backward of grad, the batched product
