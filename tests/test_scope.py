"""pygpukit_torch.enable: the scope that routes float32 products to the ops."""

import unittest.mock

import pytest
import torch
import torch.nn.functional as F

import pygpukit_torch
from pygpukit_torch.testing import LlamaBlock, assert_matmul_close, rel_error
from conftest import DEVICES, DispatchCounter, routing_operands



def recording_aot_eager(graphs):
    """A torch.compile backend that keeps each graph dynamo hands it (where
    the scope's routing shows) and runs it with aot_eager. A dispatch mode
    around a compiled call would count the ops instead, but torch 2.14 and
    newer do not compile under a non-infrastructure dispatch mode."""
    from torch._dynamo.backends.registry import lookup_backend

    def backend(gm, example_inputs):
        graphs.append(gm)
        return lookup_backend("aot_eager")(gm, example_inputs)

    return backend


def graph_targets(gm) -> list:
    """The call targets of a dynamo graph's function calls, as strings."""
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("device", DEVICES)
def test_routes_each_kind_of_product(device):
    a, b, m, w, bias = routing_operands(device)
    calls = {
        "matmul": (lambda: torch.matmul(a, b), lambda: a.double() @ b.double()),
        "@": (lambda: a @ b, lambda: a.double() @ b.double()),
        "mm": (lambda: torch.mm(a[0], b[0]), lambda: a[0].double() @ b[0].double()),
        "Tensor.mm": (lambda: a[0].mm(b[0]), lambda: a[0].double() @ b[0].double()),
        "bmm": (lambda: torch.bmm(a, b), lambda: a.double() @ b.double()),
        "addmm": (lambda: torch.addmm(m, a[0], b[0], beta=0.5, alpha=2.0),
                  lambda: 0.5 * m.double() + 2.0 * (a[0].double() @ b[0].double())),
        "baddbmm": (lambda: torch.baddbmm(m, a, b), lambda: m.double() + a.double() @ b.double()),
        "linear": (lambda: F.linear(a, w, bias), lambda: F.linear(a.double(), w.double(), bias.double())),
    }
    for name, (call, reference) in calls.items():
        with pygpukit_torch.enable(devices=(device,)) as stats:
            out = call()
        assert stats.taken == 1 and not stats.passed, (name, stats)
        assert out.dtype == torch.float32 and 1e-5 < rel_error(out, reference()) < 2e-3, name  # TF32, not FP32
    with pygpukit_torch.enable("ieee", devices=(device,)):
        assert rel_error(a @ b, a.double() @ b.double()) < 1e-6
    assert_matmul_close(a @ b, a, b, precision="ieee")  # outside: torch's own FP32 again (TF32 off by default)


@pytest.mark.parametrize("device", DEVICES)
def test_leaves_what_it_cannot_take_to_torch(device):
    a, b = torch.randn(8, 16, device=device), torch.randn(16, 4, device=device)
    with pygpukit_torch.enable(devices=(device,)) as stats:
        assert torch.equal(a.double() @ b.double(), torch.matmul(a.double(), b.double()))
        out = torch.empty(8, 4, device=device)
        torch.mm(a, b, out=out)
        torch.matmul(a[0], b[:, 0])  # 1-D operands: matmul_tf32 takes them too
        F.linear(a, torch.randn(16, device=device))  # a 1-D weight
        with pytest.raises(RuntimeError):
            torch.bmm(a, b)  # torch's own error for 2-D operands
    assert stats.taken == 1
    assert stats.passed == {"torch.float64 operands": 2, "out= given": 1,
                            "F.linear with a weight that is not 2-D or a bias that is not [out_features]": 1,
                            "bmm operands that are not 3-D and matching": 1}, stats.passed
    other = "cpu" if device != "cpu" else "meta"
    with pygpukit_torch.enable(devices=(device,)) as stats:
        torch.randn(4, 4, device=other) @ torch.randn(4, 4, device=other)
    assert stats.passed == {f"operands on {other}": 1}


EINSUMS = [  # equation, operand shapes
    ("ij,jk->ik", (40, 64), (64, 24)), ("bhqd,bhkd->bhqk", (2, 3, 16, 32), (2, 3, 24, 32)),
    ("bhqk,bhkd->bhqd", (2, 3, 16, 24), (2, 3, 24, 32)), ("...id,...jd->...ij", (2, 3, 16, 32), (3, 24, 32)),
    ("...ij,...jk", (1, 16, 32), (3, 32, 24)), ("abc,cd->dba", (4, 6, 32), (32, 5)), ("ij,jk", (16, 32), (32, 8)),
    ("ijk,k->ij", (4, 6, 32), (32,)), ("i,j->ij", (16,), (24,)), ("i,i->", (64,), (64,)),
    ("ij,ij->i", (16, 32), (16, 32)), ("bn,bnm->bm", (4, 32), (4, 32, 8)), ("ijx,jk->ik", (8, 32, 3), (32, 8)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("equation,shape_a,shape_b", EINSUMS)
def test_routes_two_operand_einsum(device, equation, shape_a, shape_b):
    """A two-operand torch.einsum runs as one matmul on the ops (labels of
    one operand that the result drops summed first, batch dimensions of size
    1 broadcast), in both call forms; gradients match torch's."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(shape_a, generator=g).to(device).requires_grad_()
    b = torch.randn(shape_b, generator=g).to(device).requires_grad_()
    with DispatchCounter() as count, pygpukit_torch.enable(devices=(device,)) as stats:
        out = torch.einsum(equation, a, b)
        again = torch.einsum(equation, [a, b])
    reference = torch.einsum(equation, a.double(), b.double())
    assert stats.taken == 2 and not stats.passed, stats
    assert count.ops.count("pygpukit.matmul_tf32.default") == 2, count.ops
    assert out.shape == reference.shape and torch.equal(out, again)
    assert rel_error(out, reference) < 2e-3
    grad = torch.randn(reference.shape, generator=g).to(device)
    ga, gb = torch.autograd.grad(out, (a, b), grad)
    ra, rb = torch.autograd.grad(reference, (a, b), grad.double())
    assert rel_error(ga, ra) < 2e-3 and rel_error(gb, rb) < 2e-3


def test_leaves_einsum_it_cannot_take_to_torch():
    a, b, c = torch.randn(3, 3), torch.randn(3, 4), torch.randn(4, 2)
    calls = [("ii,ij->j", (a, b)), ("ij,jk,kl->il", (a, b, c)), ("i...,...->i", (b, b[0])),
             ("ij,jk->ik", (a.double(), b.double()))]
    with pygpukit_torch.enable(devices=("cpu",)) as stats:
        outs = [torch.einsum(equation, *operands) for equation, operands in calls]
        with pytest.raises(RuntimeError):
            torch.einsum("ij,jk->ik", a, c)  # torch's own error for sizes that do not match
    assert stats.taken == 0
    assert stats.passed == {"einsum with a repeated label in one operand (a diagonal)": 1,
                            "einsum of 3 operands": 1, "an einsum equation it does not take": 1,
                            "torch.float64 operands": 1, "einsum operands whose sizes differ for one label": 1}, \
        stats.passed
    for out, (equation, operands) in zip(outs, calls):
        assert torch.equal(out, torch.einsum(equation, *operands))


@pytest.mark.parametrize("equation,shape_a,shape_b", [
    ("i.j,jk->ik", (3, 2, 4), (4, 5)), (". ..ij,jk->ik", (3, 4), (4, 5)), ("....i,i->...", (2, 3), (3,)),
    ("\u00e9j,jk->\u00e9k", (3, 4), (4, 5))])
def test_einsum_equations_torch_rejects_still_raise(equation, shape_a, shape_b):
    a, b = torch.randn(shape_a), torch.randn(shape_b)
    with pytest.raises(RuntimeError) as expected:
        torch.einsum(equation, a, b)
    with pygpukit_torch.enable(devices=("cpu",)) as stats:
        with pytest.raises(RuntimeError) as got:
            torch.einsum(equation, a, b)
    assert str(got.value) == str(expected.value) and stats.taken == 0


def test_einsum_with_a_batch_size_known_only_at_run_time():
    x, y, m = torch.randn(6, 3, 4), torch.randn(4, 4, 5), torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.bool)
    with unittest.mock.patch.object(torch._dynamo.config, "capture_dynamic_output_shape_ops", True):
        torch._dynamo.reset()
        graphs = []
        f = torch.compile(lambda x, m, y: torch.einsum("bij,bjk->bik", x[m], y),
                          backend=recording_aot_eager(graphs), fullgraph=True)
        with pygpukit_torch.enable("ieee", devices=("cpu",)):
            out = f(x, m, y)
    assert any("pygpukit.matmul_tf32" in t for t in graph_targets(graphs[-1]))
    assert rel_error(out, torch.einsum("bij,bjk->bik", x[m].double(), y.double())) < 1e-6


def test_einsum_under_torch_compile():
    a, b = torch.randn(2, 3, 16, 32), torch.randn(2, 3, 24, 32)
    graphs = []
    compiled = torch.compile(lambda a, b: torch.einsum("bhqd,bhkd->bhqk", a, b),
                             backend=recording_aot_eager(graphs), fullgraph=True)
    torch._dynamo.reset()
    with pygpukit_torch.enable(devices=("cpu",)):
        out = compiled(a, b)
    assert any("pygpukit.matmul_tf32" in t for t in graph_targets(graphs[-1]))
    with pygpukit_torch.enable(devices=("cpu",)):
        assert torch.equal(out, torch.einsum("bhqd,bhkd->bhqk", a, b))


@pytest.mark.parametrize("device", DEVICES)
def test_a_whole_block_runs_on_the_ops_with_gradients(device):
    """Every product of a Llama-shaped block outside attention's kernel (the
    seven projections) runs on the ops; gradients flow."""
    torch.manual_seed(0)
    block = LlamaBlock(dim=64, heads=4, kv_heads=2, hidden=128).to(device)
    x = torch.randn(2, 8, 64, device=device, requires_grad=True)
    reference = block.double()(x.double())
    block.float()
    with DispatchCounter() as count, pygpukit_torch.enable(devices=(device,)) as stats:
        out = block(x)
    assert stats.taken == 7 and count.ops.count("pygpukit.linear_tf32.default") == 7, (stats, count.ops)
    assert rel_error(out, reference) < 5e-3
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_devices_must_be_device_types():
    for bad in ("cpus", ("tpu",), (), 3):
        with pytest.raises(ValueError, match="devices"):
            with pygpukit_torch.enable(devices=bad):
                pass
    for good in ("cpu", torch.device("cpu"), ["cpu"]):
        with pygpukit_torch.enable(devices=good) as stats:
            torch.randn(2, 2) @ torch.randn(2, 2)
        assert stats.taken == 1


def test_nests_restores_and_refuses_inside_compiled_code():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with pygpukit_torch.enable(devices=("cpu",)) as outer:
        with pygpukit_torch.enable("ieee", devices=("cpu",)) as inner:
            a @ b
        a @ b
    a @ b
    assert (outer.taken, inner.taken) == (1, 1)

    def f(x, y):
        with pygpukit_torch.enable(devices=("cpu",)):
            return x @ y

    with pytest.raises(Exception, match="cannot be entered inside a function compiled by torch.compile"):
        torch.compile(f, backend="eager", fullgraph=True)(a, b)


def test_compiled_code_called_inside_holds_the_ops():
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    a, b, w = torch.randn(16, 32), torch.randn(32, 8), torch.randn(8, 32)
    compiled = torch.compile(lambda x, y, z: F.linear(x @ y @ z, z), backend=backend, fullgraph=True)
    plain = compiled(a, b, w)
    with pygpukit_torch.enable(devices=("cpu",)):
        routed = compiled(a, b, w)
    targets = graph_targets(graphs[-1])
    assert sum("pygpukit" in t for t in targets) == 3, targets
    assert not any("pygpukit" in str(n.target) for n in graphs[0].graph.nodes)
    assert rel_error(routed, plain) < 2e-3 and not torch.equal(routed, plain)


def test_keyword_arguments_functorch_and_shapes_torch_rejects():
    x, w = torch.randn(3, 4), torch.randn(6, 4)
    with pygpukit_torch.enable(devices=("cpu",)) as stats:
        out = F.linear(input=x, weight=w)  # keywords
        F.linear(x, w, torch.randn(1))  # a bias that merely broadcasts: torch's
        grad = torch.func.grad(lambda t: (t @ w.T).sum())(x)  # functorch: torch's
        with pytest.raises(RuntimeError):
            torch.bmm(torch.randn(1, 3, 4), torch.randn(5, 4, 2))  # torch's own error
        with pytest.raises(RuntimeError):
            torch.addmm(torch.zeros(3), torch.randn(3, 4), torch.randn(4))
    assert stats.taken == 1 and rel_error(out, x.double() @ w.double().T) < 2e-3
    assert torch.allclose(grad, w.sum(0).expand(3, 4))
    assert len(stats.passed) == 4, stats.passed


def test_an_addmm_input_that_does_not_broadcast_gets_torchs_error():
    input, a, b = torch.zeros(3), torch.randn(6, 16), torch.randn(16, 5)
    with pytest.raises(RuntimeError) as theirs:
        torch.addmm(input, a, b)
    with pygpukit_torch.enable(devices=("cpu",)) as stats:
        with pytest.raises(RuntimeError) as ours:
            torch.addmm(input, a, b)
    assert str(ours.value) == str(theirs.value)
    assert stats.passed == {"an addmm input that does not broadcast to the product": 1}


def test_addmm_alpha_beta_edge_cases_follow_torch():
    inp = torch.randn(3, 5, requires_grad=True)
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with pygpukit_torch.enable(devices=("cpu",)) as stats:
        torch.addmm(inp, a, b, beta=0).sum().backward()  # torch's: the input still gets a (zero) gradient
        nan_input = torch.full((3, 5), float("nan"))
        out = torch.addmm(nan_input, a, b, beta=0)  # routed: the input is ignored, NaN included
    assert torch.equal(inp.grad, torch.zeros(3, 5)) and torch.isfinite(out).all()
    assert stats.taken == 1


@pytest.mark.parametrize("scalars", [{"beta": True}, {"alpha": False}, {"alpha": 1j}, {"alpha": float("inf")},
                                     {"beta": float("nan")}, {"alpha": 2, "beta": 0.5}])
def test_addmm_scalars_are_taken_as_torch_takes_them(scalars):
    # Booleans count as 1 and 0; complex and non-finite scalars are left to
    # torch, whose own rules (an error, NaN) then apply.
    inp, a, b = torch.randn(3, 5), torch.randn(3, 4), torch.randn(4, 5)
    try:
        expected = torch.addmm(inp, a, b, **scalars)
    except RuntimeError as e:
        with pygpukit_torch.enable(devices=("cpu",)), pytest.raises(RuntimeError, match=str(e)[:30]):
            torch.addmm(inp, a, b, **scalars)
        return
    with pygpukit_torch.enable(devices=("cpu",)) as stats:
        out = torch.addmm(inp, a, b, **scalars)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected, rtol=3e-3, atol=3e-3, equal_nan=True)
    finite = all(isinstance(v, (bool, int, float)) and v == v and abs(v) != float("inf") for v in scalars.values())
    assert stats.taken == (1 if finite and scalars.get("alpha", 1) != 0 else 0), stats.summary()


def test_linalg_matmul_is_routed_and_multihead_attention_is_left_to_torch():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    q = torch.randn(2, 5, 16)
    with pygpukit_torch.enable(devices=("cpu",)) as stats:
        out = torch.linalg.matmul(a, b)
        assert stats.taken == 1
        mha(q, q, q, need_weights=False)
    assert stats.taken == 1  # as documented: its products run inside one call, on torch
    torch.testing.assert_close(out, pygpukit_torch.matmul_tf32(a, b), rtol=0, atol=0)


def test_a_precision_block_inside_the_scope_reaches_backward():
    """default_precision nested inside enable: the routed call records the
    block's precision, so its backward (run after both closed) uses it."""
    x, w = torch.randn(8, 64, requires_grad=True), torch.randn(64, 8)
    with pygpukit_torch.enable(devices=("cpu",)):
        with pygpukit_torch.default_precision("ieee"):
            y = x @ w
    y.backward(torch.ones(8, 8))
    expected = pygpukit_torch.matmul_tf32(torch.ones(8, 8), w.T, precision="ieee")
    assert torch.equal(x.grad, expected)
