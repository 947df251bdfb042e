"""Bad input gets a clear error naming the problem, the same on meta tensors
(the meta kernels torch.compile traces with) as on real ones."""

import gc
import os
import re
import subprocess
import sys
import warnings
import weakref

import pytest
import torch

import pygpukit_torch
from pygpukit_torch import linear_tf32, matmul_tf32
from conftest import DEVICES, requires_cuda, requires_two_gpus


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int32])
def test_wrong_dtype_names_it(device, dtype):
    a = torch.ones(4, 4, device=device).to(dtype)
    b = torch.ones(4, 4, device=device)
    name = str(dtype).replace("torch.", "")
    with pytest.raises(RuntimeError, match="expected float32"):
        matmul_tf32(a, b)
    with pytest.raises(RuntimeError, match="dtype"):
        matmul_tf32(b, a)
    # c10 spells the dtype as Double / Half / BFloat16 / Int
    spelled = {"float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int32": "Int"}[name]
    with pytest.raises(RuntimeError, match=spelled):
        matmul_tf32(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_zero_dim(device):
    with pytest.raises(RuntimeError, match="at least 1 dimension"):
        matmul_tf32(torch.tensor(2.0, device=device), torch.ones(3, device=device))
    with pytest.raises(RuntimeError, match="at least 1 dimension"):
        matmul_tf32(torch.ones(3, device=device), torch.tensor(2.0, device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("a_shape,b_shape", [((2, 3), (4, 5)), ((3,), (4,)), ((2, 3), (4,)),
                                             ((5,), (4, 5)), ((2, 4, 3), (2, 4, 5))])
def test_shape_mismatch_names_both_shapes(device, a_shape, b_shape):
    a, b = torch.ones(a_shape, device=device), torch.ones(b_shape, device=device)
    with pytest.raises(RuntimeError, match="cannot be multiplied") as e:
        matmul_tf32(a, b)
    assert str(list(a_shape)) in str(e.value) and str(list(b_shape)) in str(e.value)


@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_batch_broadcast_failure(device):
    a, b = torch.ones(2, 3, 4, 5, device=device), torch.ones(7, 5, 6, device=device)
    with pytest.raises(RuntimeError, match=re.escape("matmul_tf32: batch dimensions cannot be broadcast: a has shape "
                                                     "[2, 3, 4, 5] and b has shape [7, 5, 6] (3 vs 7 at batch "
                                                     "dimension 1)")):
        matmul_tf32(a, b)


@pytest.mark.skipif(sys.platform != "linux", reason="caps the child's address space with RLIMIT_AS")
def test_result_too_large_to_count():
    """Expanded operands can describe a result of 2^64 elements: an error
    before anything is allocated, as torch.matmul gives, not an attempt to
    materialize the inputs (run in a child capped at 8 GB of address space,
    so that a regression fails here instead of exhausting the machine)."""
    code = """if True:
        import resource, torch, pygpukit_torch
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
        a = torch.zeros(1, 1, 1, 1).expand(2 ** 32, 1, 1, 1)
        b = torch.zeros(1, 1, 1).expand(2 ** 32, 1, 1)
        try:
            pygpukit_torch.matmul_tf32(a, b)
        except RuntimeError as e:
            print(e)
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert "more elements than int64_t can count" in done.stdout, (done.stdout, done.stderr)


def test_result_too_large_to_count_on_meta_tensors():
    """The meta kernel makes the same check, with the same message
    (torch's own, from allocating the result, named neither the op nor the
    operands)."""
    messages = []
    for device in ("cpu", "meta"):
        a = torch.empty(1, 1, 1, device=device).expand(2 ** 40, 4096, 1)
        b = torch.empty(1, 1, 1, device=device).expand(2 ** 40, 1, 4096)
        with pytest.raises(RuntimeError, match="more elements than int64_t can count") as info:
            matmul_tf32(a, b)
        messages.append(str(info.value).split("\n")[0])
    assert messages[0] == messages[1], messages


@pytest.mark.parametrize("shapes", [((2 ** 10, 1, 1, 2 ** 44), (2 ** 10, 2 ** 44, 1)),  # small result
                                    ((2 ** 40, 1, 0, 4), (2 ** 40, 4, 1)),  # empty result
                                    ((2 ** 30, 1, 1, 1), (2 ** 31, 1, 1))])  # 2^61 results: 2^63 bytes
def test_operands_too_large_to_count_when_broadcast(shapes):
    """Operands that broadcast over the batch dimensions to more elements
    than int64_t counts, or a result with more bytes, raise before anything
    is allocated, on real and meta tensors alike, also where the result
    itself is small or empty (as torch.matmul raises)."""
    messages = []
    for device in ("cpu", "meta"):
        a, b = (torch.zeros(1, device=device).expand(*shape) for shape in shapes)
        with pytest.raises(RuntimeError, match="more elements than int64_t can count") as info:
            matmul_tf32(a, b)
        messages.append(str(info.value).split("\n")[0])
    assert messages[0] == messages[1], messages


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float16, None), (torch.float64, torch.float32, None),
                                    (torch.float32, torch.float32, torch.bfloat16), (torch.int64, torch.bool, None)])
def test_dtype_errors_on_meta_tensors_read_as_on_real_ones(dtypes):
    """The meta kernels (meta tensors, torch.compile) name dtypes as the CPU
    and CUDA kernels do ("Float", not "torch.float32"): the same message."""
    x_dtype, w_dtype, bias_dtype = dtypes
    messages = []
    for device in ("cpu", "meta"):
        x, w = torch.ones(2, 3, device=device, dtype=x_dtype), torch.ones(3, 3, device=device, dtype=w_dtype)
        bias = None if bias_dtype is None else torch.ones(3, device=device, dtype=bias_dtype)
        calls = [lambda: linear_tf32(x, w, bias)]
        if bias_dtype is None:
            calls.append(lambda: matmul_tf32(x, w))
        for call in calls:
            with pytest.raises(RuntimeError, match="expected float32 tensors") as info:
                call()
            messages.append(str(info.value).split("\n")[0])
    half = len(messages) // 2
    assert messages[:half] == messages[half:], messages


@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_unknown_precision(device):
    a = torch.ones(2, 2, device=device)
    with pytest.raises(ValueError, match="precision must be"):
        matmul_tf32(a, a, precision="fp16")
    # A NUL or other unprintable byte is escaped, and a long value cut short:
    # the message stays whole and small.
    with pytest.raises(ValueError) as info:
        matmul_tf32(a, a, precision="ieee\x00junk" + "z" * 10000)
    assert "got 'ieee\\x00junk" in str(info.value) and "...'" in str(info.value) and len(str(info.value)) < 300
    # A string UTF-8 cannot encode (a lone surrogate): the same error, not the
    # schema's type error naming neither the value nor the choices.
    with pytest.raises(ValueError, match="precision must be .* got 'x\\\\xed\\\\xa0\\\\x80'"):
        matmul_tf32(a, a, precision="x\ud800")
    with pytest.raises(ValueError, match="unknown activation 'relu\\\\xed\\\\xa0\\\\x80'"):
        linear_tf32(a, a, activation="relu\ud800")


@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_several_problems_report_the_first_as_eager_does(device):
    """Meta tensors (the meta kernels) check in the CPU and CUDA order, so
    a call with more than one problem names the same one everywhere: a
    transposed weight as such (not its bias), shapes before the precision,
    the arguments before the activation."""
    x, w, b = (torch.ones(s, device=device) for s in ((2, 3), (4, 3), (4,)))
    with pytest.raises(RuntimeError, match="x's last dimension must equal weight's in_features.*"
                                           + re.escape("(x.size(-1) = 3 but weight.size(1) = 4)")):
        linear_tf32(x, w.T, b)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.ops.pygpukit.matmul_tf32(x, x, precision="fp16")
    with pytest.raises(RuntimeError, match="expected bias of shape"):
        torch.ops.pygpukit.linear_tf32(x, w, torch.ones(3, device=device), "bogus", precision="fp16")
    with pytest.raises(ValueError, match="unknown activation"):
        torch.ops.pygpukit.linear_tf32(x, w, b, "bogus", precision="fp16")
    # The same with grad: the autograd kernel reads the activation itself
    # (a frozen weight's GELU is applied outside the fused node), and named
    # the activation where the operator names the tensors.
    x.requires_grad_()
    with pytest.raises(RuntimeError, match="expected float32 tensors"):
        torch.ops.pygpukit.linear_tf32(x.double(), w, b, "bogus")
    with pytest.raises(RuntimeError, match="expected bias of shape"):
        torch.ops.pygpukit.linear_tf32(x, w, torch.ones(3, device=device), "bogus")


def test_torch_compile_names_a_transposed_weight():
    x, w, b = torch.randn(2, 3), torch.randn(4, 3), torch.randn(4)
    compiled = torch.compile(lambda x, w, b: linear_tf32(x, w.T, b), backend="aot_eager")
    with pytest.raises(RuntimeError, match="x's last dimension must equal weight's in_features"):
        compiled(x, w, b)


def test_torch_compile_quotes_the_eager_error():
    # Dynamo turns every error of a meta kernel into a RuntimeError
    # of its own; the one quoted must still be eager's ValueError.
    compiled = torch.compile(lambda a: matmul_tf32(a, a, precision="fp16"), backend="aot_eager", fullgraph=True)
    with pytest.raises(RuntimeError, match=r"ValueError.*matmul_tf32: precision must be"):
        compiled(torch.ones(2, 2))


@requires_cuda
def test_cpu_and_cuda_operands():
    a, b = torch.ones(2, 2), torch.ones(2, 2, device="cuda")
    with pytest.raises(RuntimeError, match="same device"):
        matmul_tf32(a, b)
    with pytest.raises(RuntimeError, match="same device"):
        matmul_tf32(b, a)


@requires_two_gpus
def test_two_different_gpus():
    a, b = torch.ones(2, 2, device="cuda:0"), torch.ones(2, 2, device="cuda:1")
    with pytest.raises(RuntimeError, match="same device, got a on cuda:0 and b on cuda:1"):
        matmul_tf32(a, b)


def test_sparse_operand():
    a = torch.eye(3).to_sparse()
    with pytest.raises(RuntimeError, match="expected dense \\(strided\\) tensors, got a with layout torch.sparse_coo"):
        matmul_tf32(a, torch.ones(3, 3))
    with pytest.raises(RuntimeError, match="got weight with layout torch.sparse_coo"):
        linear_tf32(torch.ones(2, 3), a)


def test_sparse_operand_to_kernel_info_and_nested_operands():
    a = torch.eye(3)
    with pytest.raises(RuntimeError, match="kernel_info: expected dense \\(strided\\) tensors, got b with layout"):
        pygpukit_torch.kernel_info(a, a.to_sparse())
    nested = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)])
    with pytest.raises(RuntimeError, match="matmul_tf32: nested tensors are not supported, got a nested tensor for a"):
        matmul_tf32(nested, torch.ones(3, 3))


def test_named_errors_replace_the_dispatchers():
    """The wrappers call the operator first and look for the problem only
    when it fails (pygpukit_torch.ops._checked_on_failure): the error that
    names it is raised on its own, not chained on the dispatcher's, and a
    failure the checks cannot name keeps the operator's own error."""
    sparse = torch.eye(3).to_sparse()
    for call in (lambda: matmul_tf32(sparse, torch.ones(3, 3)), lambda: linear_tf32(torch.ones(2, 3), sparse),
                 lambda: pygpukit_torch.TF32Linear(3, 3)(sparse), lambda: matmul_tf32(torch.ones(2, 2), [1.0])):
        with pytest.raises((RuntimeError, TypeError)) as info:
            call()
        assert "Could not run" not in str(info.value) and "Expected a value of type" not in str(info.value)
        assert info.value.__context__ is None and info.value.__cause__ is None
    with pytest.raises(RuntimeError, match="matmul_tf32: shapes cannot be multiplied"):
        matmul_tf32(torch.ones(2, 3), torch.ones(2, 3))


def test_arguments_freed_when_an_error_is_caught():
    """A failed call's error holds no reference cycle: once it is caught and
    dropped, the arguments are freed at once (no garbage collection), as
    after torch.matmul's errors (a caller that catches an out-of-memory
    error and retries smaller must get the memory back)."""
    calls = {"matmul_tf32 (dispatcher error)": lambda t: matmul_tf32(t.to_sparse(), torch.ones(3, 3)),
             "matmul_tf32 (operator error)": lambda t: matmul_tf32(t, torch.ones(2, 3)),
             "linear_tf32": lambda t: linear_tf32(t, torch.ones(3, 2)),
             "TF32Linear": lambda t: pygpukit_torch.TF32Linear(2, 3)(t.to_sparse())}
    for name, call in calls.items():
        gc.disable()
        try:
            arg = torch.ones(4, 3)
            freed = weakref.ref(arg)
            with pytest.raises((RuntimeError, TypeError)):
                call(arg)
            del arg
            assert freed() is None, name
        finally:
            gc.enable()


class _TensorLike:
    """Not a tensor, but torch functions take it through __torch_function__."""

    def __init__(self, t):
        self.t = t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda v: v.t if isinstance(v, _TensorLike) else v  # noqa: E731
        return func(*map(unwrap, args), **{k: unwrap(v) for k, v in (kwargs or {}).items()})


def test_tensor_likes_go_through_their_override():
    """A tensor-like's __torch_function__ handles the call in every wrapper,
    as torch.matmul lets it, instead of a TypeError from some of them."""
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    expected = matmul_tf32(a, b)
    assert torch.equal(matmul_tf32(_TensorLike(a), b), expected)
    assert torch.equal(linear_tf32(_TensorLike(a), b.mT), expected)
    assert pygpukit_torch.kernel_info(_TensorLike(a), b) == pygpukit_torch.kernel_info(a, b)
    assert torch.equal(torch.compile(lambda x: matmul_tf32(x, b), backend="eager")(_TensorLike(a)), expected)


def test_quantized_operand():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in torch 2.15, to be removed
            quantized = torch.quantize_per_tensor(torch.eye(3), 0.1, 0, torch.qint8)
    except (AttributeError, RuntimeError) as e:
        pytest.skip(f"this torch has no quantized tensors: {e}")
    with pytest.raises(RuntimeError, match="linear_tf32: expected float32 tensors, got weight quantized as torch.qint8"):
        linear_tf32(torch.ones(2, 3), quantized)


def test_none_for_a_tensor():
    a = torch.ones(2, 2)
    with pytest.raises(TypeError, match="matmul_tf32: expected b to be a torch.Tensor, got NoneType"):
        matmul_tf32(a, None)
    with pytest.raises(TypeError, match="linear_tf32: expected weight to be a torch.Tensor, got NoneType"):
        linear_tf32(a, None)
    with pytest.raises(TypeError, match="kernel_info: expected a to be a torch.Tensor, got list"):
        pygpukit_torch.kernel_info([[1.0]], a)
    # The raw operators take None as an undefined tensor: named too.
    with pytest.raises(RuntimeError, match="matmul_tf32: expected tensors, got None for b"):
        torch.ops.pygpukit.matmul_tf32(a, None)
    with pytest.raises(RuntimeError, match="linear_tf32: expected tensors, got None for weight"):
        torch.ops.pygpukit.linear_tf32(a, None)
    assert torch.equal(linear_tf32(a, a, None), a @ a)  # a None bias is no bias
    # ... also when the other operand requires grad (the autograd kernel
    # leaves a None to the checks below it).
    g = torch.ones(2, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="matmul_tf32: expected tensors, got None for b"):
        torch.ops.pygpukit.matmul_tf32(g, None)
    with pytest.raises(RuntimeError, match="linear_tf32: expected tensors, got None for weight"):
        torch.ops.pygpukit.linear_tf32(g, None)
    # The same on meta tensors, which the meta kernels serve.
    m = torch.empty(2, 2, device="meta")
    with pytest.raises(RuntimeError, match="matmul_tf32: expected tensors, got None for a"):
        torch.ops.pygpukit.matmul_tf32(None, m)
    with pytest.raises(RuntimeError, match="linear_tf32: expected tensors, got None for weight"):
        torch.ops.pygpukit.linear_tf32(m, None)
    with pytest.raises(RuntimeError, match="matmul_tf32: expected tensors, got None for b"):
        torch.ops.pygpukit.matmul_kernel_info(m, None)


def test_activation_none_or_of_another_type():
    a = torch.randn(2, 3)
    w = torch.randn(4, 3)
    assert torch.equal(linear_tf32(a, w, None, None), linear_tf32(a, w))  # None: no activation
    with pytest.raises(TypeError, match="linear_tf32: activation must be one of 'none', .* or None, got int 1"):
        linear_tf32(a, w, None, 1)
    with pytest.raises(TypeError, match="activation must be .* got GELU"):
        linear_tf32(a, w, None, torch.nn.GELU())


def test_precision_of_another_type():
    a = torch.ones(2, 2)
    with pytest.raises(TypeError, match="precision must be one of 'tf32', 'tf32x3', 'fp32', 'ieee' or None, got int 3"):
        matmul_tf32(a, a, precision=3)
    with pytest.raises(TypeError, match="linear_tf32: precision must be"):
        linear_tf32(a, a, precision=3)


def test_built_with_cuda_is_true_wherever_a_gpu_runs_the_tests():
    assert isinstance(pygpukit_torch.built_with_cuda, bool)
    if torch.cuda.is_available():
        assert pygpukit_torch.built_with_cuda, "a CPU-only build on a machine with a GPU"


@pytest.mark.skipif(pygpukit_torch.built_with_cuda, reason="a CPU-only build's CUDA kernel (PYGPUKIT_BUILD_CUDA=0)")
@pytest.mark.parametrize("op,args", [
    ("matmul_tf32", (torch.ones(2, 3), torch.ones(3, 4))),
    ("matmul_kernel_info", (torch.ones(2, 3), torch.ones(3, 4))),
    ("linear_tf32", (torch.ones(2, 3), torch.ones(4, 3), None)),
])
def test_cpu_only_build_names_the_cause_for_cuda_tensors(op, args):
    """What CUDA tensors reach in a CPU-only build, sent there directly (a
    machine without a GPU has no CUDA tensors to make)."""
    overload = getattr(torch.ops.pygpukit, op).default
    with pytest.raises(RuntimeError, match=f"{op}: got CUDA tensors, but this pygpukit_torch was built without"):
        overload.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA), *args)


def test_kernel_info_inside_vmap_names_the_problem():
    b = torch.randn(3, 4)
    with pytest.raises(RuntimeError, match="kernel_info: called inside torch.func.vmap"):
        torch.vmap(lambda x: (pygpukit_torch.kernel_info(x, b), x)[1])(torch.randn(2, 5, 3))
    # Outside vmap, on the batched operand: what the batched call runs.
    assert pygpukit_torch.kernel_info(torch.randn(2, 5, 3), b).startswith("cpu")
