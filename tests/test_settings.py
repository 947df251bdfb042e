"""The operators' settings (default precision, forced kernel, environment
variables) under threads, torch.compile in each mode, CUDA graphs and
export; and many threads making their first calls at once."""

import concurrent.futures
import json
import os
import subprocess
import sys
import threading

import pytest
import torch

import pygpukit_torch
from pygpukit_torch import matmul_tf32
from pygpukit_torch._settings import innermost
from conftest import requires_cuda

HERE = os.path.dirname(os.path.abspath(__file__))


def run_python(code: str, **env) -> list:
    """`code` in a fresh interpreter whose environment adds `env`, with the
    settings' variables removed first; the lines it printed (it must
    succeed)."""
    full = dict(os.environ)
    for name in ("PYGPUKIT_PRECISION", "PYGPUKIT_ALLOW_TF32", "PYGPUKIT_KERNEL", "PYGPUKIT_STREAM_K"):
        full.pop(name, None)
    full.update(env)
    result = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()


def test_environment_is_read_once_and_a_later_change_raises():
    code = ("import os, torch, pygpukit_torch\n"
            "x = torch.eye(8) * (1 + 2**-11 + 2**-12)\n"
            "print(float(pygpukit_torch.matmul_tf32(x, torch.eye(8))[0, 0]) - 1)\n"
            "os.environ['PYGPUKIT_PRECISION'] = 'tf32'\n"
            "try:\n"
            "    pygpukit_torch.matmul_tf32(x, torch.eye(8))\n"
            "except RuntimeError as e:\n"
            "    print(e)\n"
            "with pygpukit_torch.default_precision('tf32'):\n"  # a block still works
            "    print(float(pygpukit_torch.matmul_tf32(x, torch.eye(8))[0, 0]) - 1)\n")
    lines = run_python(code, PYGPUKIT_PRECISION="ieee")
    assert float(lines[0]) == 2 ** -11 + 2 ** -12
    assert ("the environment variable PYGPUKIT_PRECISION changed from 'ieee' to 'tf32' after the first pygpukit "
            "call read it" in lines[1] and "pygpukit_torch.default_precision(...)" in lines[1]), lines
    assert float(lines[2]) == 2 ** -10


def test_environment_edge_cases():
    """An unknown PYGPUKIT_ALLOW_TF32 raises instead of meaning TF32; a
    variable going from unset to empty is no change (empty counts as
    unset); the first call reads the environment even inside a block, so
    a later change is still caught."""
    code = ("import os, torch, pygpukit_torch\n"
            "try:\n"
            "    pygpukit_torch.matmul_tf32(torch.eye(2), torch.eye(2))\n"
            "except ValueError as e:\n"
            "    print('ValueError', e)\n")
    lines = run_python(code, PYGPUKIT_ALLOW_TF32="garbage")
    assert "PYGPUKIT_ALLOW_TF32 must be 0/false/no/off or 1/true/yes/on, got 'garbage'" in lines[0], lines
    code = ("import os, torch, pygpukit_torch\n"
            "with pygpukit_torch.default_precision('ieee'):\n"
            "    pygpukit_torch.matmul_tf32(torch.eye(2), torch.eye(2))\n"
            "os.environ['PYGPUKIT_ALLOW_TF32'] = ''\n"
            "pygpukit_torch.matmul_tf32(torch.eye(2), torch.eye(2))\n"
            "os.environ['PYGPUKIT_PRECISION'] = 'ieee'\n"
            "try:\n"
            "    pygpukit_torch.matmul_tf32(torch.eye(2), torch.eye(2))\n"
            "except RuntimeError as e:\n"
            "    print('RuntimeError', e)\n")
    lines = run_python(code)
    assert len(lines) == 1 and "PYGPUKIT_PRECISION changed from unset to 'ieee'" in lines[0], lines


@pytest.mark.parametrize("device", ["cpu", "meta", pytest.param("cuda", marks=requires_cuda)])
def test_bad_precision_environment_variable_raises_on_every_device(device):
    """A bad PYGPUKIT_PRECISION raises the same ValueError on meta tensors
    (the meta kernels) as in eager mode, for both ops and
    kernel_info; an explicit precision does not read it; a long value is
    echoed cut short."""
    code = ("import torch, pygpukit_torch\n"
            f"a = torch.ones(2, 2, device={device!r})\n"
            "for call in (lambda: pygpukit_torch.matmul_tf32(a, a), lambda: pygpukit_torch.linear_tf32(a, a),\n"
            "             lambda: pygpukit_torch.kernel_info(a, a)):\n"
            "    try:\n"
            "        call()\n"
            "        print('no error')\n"
            "    except ValueError as e:\n"
            "        print(str(e).replace(chr(10), ' '))\n"
            "pygpukit_torch.matmul_tf32(a, a, precision='ieee')\n"
            "print('explicit ok')\n")
    lines = run_python(code, PYGPUKIT_PRECISION="fp16")
    assert len(lines) == 4 and lines[3] == "explicit ok", lines
    for line in lines[:3]:
        assert "PYGPUKIT_PRECISION must be one of 'tf32', 'tf32x3', 'fp32', 'ieee', got 'fp16'" in line, lines
    lines = run_python(code, PYGPUKIT_PRECISION="x" * 5000)
    assert "got '" + "x" * 64 + "...'" in lines[0] and len(lines[0]) < 400, lines


@requires_cuda
def test_bad_kernel_environment_variable_raises_on_cuda_calls():
    code = ("import torch, pygpukit_torch\n"
            "a = torch.ones(4, 4, device='cuda')\n"
            "print(pygpukit_torch.kernel_info(a.cpu(), a.cpu()).split(' ')[0])\n"  # the CPU path takes no kernel
            "try:\n"
            "    pygpukit_torch.matmul_tf32(a, a)\n"
            "except ValueError as e:\n"
            "    print(e)\n"
            "with pygpukit_torch.force_kernel('fma'):\n"  # a block overrides it
            "    print(pygpukit_torch.kernel_info(a, a).split(' ')[0])\n")
    lines = run_python(code, PYGPUKIT_KERNEL="wgma")
    assert lines[0] == "cpu" and lines[2] == "fma", lines
    assert "PYGPUKIT_KERNEL must be 'auto', 'wgmma'" in lines[1] and "got 'wgma'" in lines[1], lines


def test_blocks_in_threads_closing_out_of_order_leave_no_setting_behind():
    """Blocks open in two threads: the innermost still open is in force,
    and once both close the default is back, whatever the order."""
    x = torch.eye(8) * (1 + 2 ** -11 + 2 ** -12)
    tf32, ieee = matmul_tf32(x, torch.eye(8), precision="tf32"), matmul_tf32(x, torch.eye(8), precision="ieee")
    entered = [threading.Event(), threading.Event()]
    leave = [threading.Event(), threading.Event()]
    left = [threading.Event(), threading.Event()]

    def hold(i, precision):
        with pygpukit_torch.default_precision(precision):
            entered[i].set()
            leave[i].wait(10)
        left[i].set()

    threads = [threading.Thread(target=hold, args=(0, "tf32x3")), threading.Thread(target=hold, args=(1, "ieee"))]
    threads[0].start()
    entered[0].wait(10)
    threads[1].start()
    entered[1].wait(10)
    assert innermost("precision") == "ieee" and torch.equal(matmul_tf32(x, torch.eye(8)), ieee)
    leave[0].set()  # the first block closes first
    left[0].wait(10)
    assert innermost("precision") == "ieee" and torch.equal(matmul_tf32(x, torch.eye(8)), ieee)
    leave[1].set()
    left[1].wait(10)
    for t in threads:
        t.join()
    assert innermost("precision") is None and torch.equal(matmul_tf32(x, torch.eye(8)), tf32)


def test_blocks_in_asyncio_tasks_keep_their_own_precision():
    """Two tasks on one thread, their blocks closing out of order: each
    task's calls run at its own block's precision, and the mode stack is
    left empty."""
    import asyncio

    x, eye = torch.eye(8) * (1 + 2 ** -11 + 2 ** -12), torch.eye(8)
    expected = {p: matmul_tf32(x, eye, precision=p) for p in ("ieee", "tf32")}
    seen = {}

    async def task(precision, delay):
        with pygpukit_torch.default_precision(precision):
            await asyncio.sleep(delay)
            seen[precision] = matmul_tf32(x, eye)

    async def both():
        await asyncio.gather(task("ieee", 0.01), task("tf32", 0.05))

    asyncio.run(both())
    assert all(torch.equal(seen[p], expected[p]) for p in expected)
    assert torch._C._len_torch_function_stack() == 0 and innermost("precision") is None


class GraphRecorder:
    """A torch.compile backend that keeps each graph Dynamo hands it."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def precision_in_graph(gm: torch.fx.GraphModule):
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and "pygpukit" in str(n.target)]
    return [n.kwargs.get("precision") for n in calls]


def test_compiled_code_is_recompiled_for_a_precision_block_around_its_call():
    """Dynamo guards on the block: inside, the function is compiled again
    with the block's precision written into the graph; outside, the first
    compilation is reused."""
    torch._dynamo.reset()
    x, eye = torch.eye(8) * (1 + 2 ** -11 + 2 ** -12), torch.eye(8)
    ieee, tf32x3, default = (matmul_tf32(x, eye, precision=p) for p in ("ieee", "tf32x3", None))
    recorder = GraphRecorder()
    compiled = torch.compile(lambda a, b: torch.ops.pygpukit.matmul_tf32(a, b) + 0, backend=recorder, fullgraph=True)
    assert torch.equal(compiled(x, eye), default)
    with pygpukit_torch.default_precision("ieee"):
        assert torch.equal(compiled(x, eye), ieee)
        with pygpukit_torch.default_precision("tf32x3"):
            assert torch.equal(compiled(x, eye), tf32x3)
    assert torch.equal(compiled(x, eye), default)
    with pygpukit_torch.default_precision("ieee"):
        assert torch.equal(compiled(x, eye), ieee)
    assert [precision_in_graph(g) for g in recorder.graphs] == [[None], ["ieee"], ["tf32x3"]]


def test_exported_program_holds_the_precision_of_a_block_around_the_export():
    class M(torch.nn.Module):
        def forward(self, a, b):
            return torch.ops.pygpukit.matmul_tf32(a, b)

    x = torch.randn(4, 4)
    plain = torch.export.export(M(), (x, x))
    with pygpukit_torch.default_precision("ieee"):
        inside = torch.export.export(M(), (x, x))
    assert precision_in_graph(plain.graph_module) == [None]
    assert precision_in_graph(inside.graph_module) == ["ieee"]


@requires_cuda
@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune-no-cudagraphs"])
def test_settings_apply_to_compiled_code_in_every_mode(mode):
    """A default_precision or force_kernel block around the call of a
    compiled function applies to it, CUDA graphs of reduce-overhead
    included: the results equal the eager calls' under the same setting,
    before and after calls outside."""
    torch._dynamo.reset()
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(256, 512, device="cuda", generator=g)
    b = torch.randn(512, 384, device="cuda", generator=g)
    eager = {p: matmul_tf32(a, b, precision=p) for p in ("tf32", "tf32x3", "ieee")}
    with pygpukit_torch.force_kernel("fma"):
        eager["fma"] = matmul_tf32(a, b)
    with pygpukit_torch.force_kernel("mma_sync"):
        eager["mma_sync"] = matmul_tf32(a, b)
    assert not torch.equal(eager["tf32"], eager["ieee"]) and not torch.equal(eager["tf32"], eager["fma"])
    compiled = torch.compile(lambda x, y: torch.ops.pygpukit.matmul_tf32(x, y) * 1.0, mode=mode)

    def run():
        out = compiled(a, b).clone()
        torch.cuda.synchronize()
        return out

    for _ in range(3):  # recorded, then replayed
        assert torch.equal(run(), eager["tf32"])
        for precision in ("ieee", "tf32x3"):
            with pygpukit_torch.default_precision(precision):
                assert torch.equal(run(), eager[precision]), precision
        for kernel in ("fma", "mma_sync"):
            with pygpukit_torch.force_kernel(kernel):
                assert torch.equal(run(), eager[kernel]), kernel


@requires_cuda
def test_a_cuda_graph_captured_by_hand_replays_what_it_recorded():
    """As for torch's own matmuls, replay re-runs the recorded kernels: the
    documented behaviour, so a change of setting needs a new capture."""
    a, b = torch.randn(256, 512, device="cuda"), torch.randn(512, 384, device="cuda")
    tf32, ieee = matmul_tf32(a, b), matmul_tf32(a, b, precision="ieee")
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        matmul_tf32(a, b)  # warm-up outside the capture
        with torch.cuda.graph(graph):
            out = matmul_tf32(a, b)
    torch.cuda.current_stream().wait_stream(stream)
    with pygpukit_torch.default_precision("ieee"):
        graph.replay()
        torch.cuda.synchronize()
    assert torch.equal(out, tf32) and not torch.equal(out, ieee)


FAMILIES = ["decode", "auto", "wgmma", "wgmma_swap_ab", "mma_sync", "mma_sync_large", "mma_sync_medium",
            "mma_sync_small", "mma_sync_compact", "skinny", "gemv", "fma"]
# Fresh processes running at once: most of a case's time is the interpreter
# and CUDA starting, so the cases overlap; each process holds its own context.
FIRST_USE_PROCESSES = 4


def run_first_use(family: str, streams: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(HERE, "first_use_threads.py"), family, streams],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


@pytest.fixture(scope="module")
def first_use_runs(request):
    """The selected cases of test_many_threads_on_first_use, started
    together when the first one runs: {(family, streams): future}. The
    root of the collection tree holds the items selected to run."""
    selected = request.node.listchain()[0].items
    cases = [(item.callspec.params["family"], item.callspec.params["streams"]) for item in selected
             if getattr(item, "originalname", None) == "test_many_threads_on_first_use"]
    pool = concurrent.futures.ThreadPoolExecutor(FIRST_USE_PROCESSES)
    yield {case: pool.submit(run_first_use, *case) for case in cases}
    pool.shutdown(cancel_futures=True)


@requires_cuda
@pytest.mark.parametrize("streams", ["own", "default"])
@pytest.mark.parametrize("family", FAMILIES)
def test_many_threads_on_first_use(family, streams, first_use_runs):
    """A fresh process per kernel family (nothing set up yet), one thread
    per problem released together, each on a stream of its own or all on
    the default stream: no call fails, and every result is bitwise equal
    to the same call made alone. Threads that made no CUDA runtime call
    yet have no current context, which the driver call encoding the Hopper
    path's tensor maps needs (csrc/cuda/hopper/tensor_map.cu)."""
    result = first_use_runs[(family, streams)].result()
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert not report["errors"] and not report["mismatches"], report
    assert report["calls"] == report["threads"] * 8
