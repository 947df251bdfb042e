"""The public pytest helpers of pygpukit_torch.testing: they pass the ops'
results and fail on the errors they exist to catch."""

import copy
import math

import pytest
import torch

import pygpukit_torch
from pygpukit_torch.testing import (assert_linear_close, assert_matmul_close, assert_model_close, matmul_errors,
                                    matmul_reference, round_tf32)
from conftest import DEVICES


def truncate_tf32(t: torch.Tensor) -> torch.Tensor:
    """t with its low 13 mantissa bits dropped: TF32 by truncation."""
    return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["tf32", "tf32x3", "fp32", "ieee"])
def test_passes_the_ops_results(device, precision):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, 256, generator=g).to(device), torch.randn(256, 64, generator=g).to(device)
    assert_matmul_close(pygpukit_torch.matmul_tf32(a, b, precision=precision), a, b, precision=precision)
    x, w, bias = a, b.T.contiguous(), torch.randn(64, generator=g).to(device)
    out = pygpukit_torch.linear_tf32(x, w, bias, "gelu", precision=precision)
    assert_linear_close(out, x, w, bias, "gelu", precision=precision)


def test_torch_testing_fails_where_the_helper_passes():
    """The reason the helper exists: torch's default tolerances are for
    float32, not TF32."""
    a, b = torch.randn(128, 64), torch.randn(64, 256)
    out = pygpukit_torch.matmul_tf32(a, b)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(out, a @ b)
    assert_matmul_close(out, a, b)


def test_fails_on_truncated_inputs():
    """A kernel that truncates its inputs to TF32 stays within the
    elementwise bound but not the norm bound (about 2.6 times rounding's
    error), and the message says so."""
    a, b = torch.randn(256, 512), torch.randn(512, 256)
    truncated = matmul_reference(truncate_tf32(a), truncate_tf32(b)).float()
    with pytest.raises(AssertionError, match="(?s)norm error exceeds the bound.*allowed"):
        assert_matmul_close(truncated, a, b)
    assert_matmul_close(matmul_reference(round_tf32(a), round_tf32(b)).float(), a, b)


def test_matmul_errors_measures_norm_worst_element_and_non_finite_entries():
    a, b = torch.randn(64, 128, dtype=torch.float64), torch.randn(128, 32, dtype=torch.float64)
    exact = a @ b
    assert matmul_errors(exact, a, b) == (0.0, 0.0, True)
    out = exact.clone()
    out[3, 4] += 1e-3 * float(exact.norm())  # one wrong element: 1e-3 of the norm
    errors = matmul_errors(out, a, b)
    scale = float(a[3].abs() @ b[:, 4].abs())
    assert errors.norm == pytest.approx(1e-3) and errors.worst == pytest.approx(1e-3 * float(exact.norm()) / scale)
    a[0, 0], b[1, 0] = float("inf"), float("nan")  # row 0 infinite, column 0 NaN
    ref = a @ b
    assert matmul_errors(ref, a, b).nonfinite_match and math.isfinite(matmul_errors(ref, a, b).norm)
    flipped = ref.clone()
    flipped[0, 1] = -flipped[0, 1]
    assert not matmul_errors(flipped, a, b).nonfinite_match
    ref[5, 5] = float("nan")  # NaN where the reference is finite: norm and worst NaN, comparisons fail
    errors = matmul_errors(ref, a, b)
    assert not errors.nonfinite_match and not errors.norm <= 1.0 and not errors.worst <= 1.0


def test_fails_on_one_wrong_element_and_names_it():
    a, b = torch.randn(64, 128), torch.randn(128, 32)
    out = pygpukit_torch.matmul_tf32(a, b)
    out[17, 5] += 0.05 * float(out.abs().max())
    with pytest.raises(AssertionError, match=r"(?s)Mismatched elements: 1 / 2048.*index \(17, 5\)") as error:
        assert_matmul_close(out, a, b)
    assert "Norm error" in str(error.value)
    out[17, 5] = float("nan")
    with pytest.raises(AssertionError, match=r"index \(17, 5\): out = nan"):
        assert_matmul_close(out, a, b)


def test_tf32_result_fails_the_fp32_precisions():
    a, b = torch.randn(128, 256), torch.randn(256, 128)
    out = pygpukit_torch.matmul_tf32(a, b, precision="tf32")
    for precision in ("tf32x3", "ieee"):
        with pytest.raises(AssertionError):
            assert_matmul_close(out, a, b, precision=precision)


def test_shape_dtype_and_argument_errors():
    a, b = torch.randn(8, 4), torch.randn(4, 3)
    with pytest.raises(AssertionError, match="shapes do not match"):
        assert_matmul_close(torch.zeros(3, 8), a, b)
    with pytest.raises(AssertionError, match="out is torch.float64"):
        assert_matmul_close((a @ b).double(), a, b)
    with pytest.raises(ValueError, match="precision must be one of"):
        assert_matmul_close(a @ b, a, b, precision="fp16")
    with pytest.raises(ValueError, match="activation must be one of"):
        assert_linear_close(a @ b, a, b.T, None, "tanh")


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(256, 512), torch.nn.Linear(512, 256)

    def forward(self, x):
        return {"y": self.down(torch.relu(self.up(x))), "shape": torch.tensor(x.shape)}


@pytest.mark.parametrize("device", DEVICES)
def test_model_helper(device):
    torch.manual_seed(0)
    model = Mlp().to(device)
    original = copy.deepcopy(model)
    pygpukit_torch.swap_linear_(model)
    x = torch.randn(64, 256, device=device)
    assert_model_close(model, original, x)
    with pygpukit_torch.default_precision("tf32x3"):
        assert_model_close(model, original, x, precision="tf32x3")
    with pytest.raises(AssertionError, match=r"(?s)output\[.y.\] is not close!.*Norm error"):
        assert_model_close(model, original, x, precision="ieee")  # TF32's error is above FP32's tolerance
    broken = copy.deepcopy(original)
    with torch.no_grad():
        broken.down.bias[3] += 1.0
    with pytest.raises(AssertionError, match=r"output\['y'\] is not close!"):
        assert_model_close(broken, original, x)


def test_non_finite_and_overflowing_references():
    """Where the reference is infinite the result must be the same infinity
    (the bound is infinite there too); where it lies beyond float32's range
    the infinity of its sign passes."""
    inf = float("inf")
    a, b = torch.tensor([[inf, 1.0]]), torch.ones(2, 1)
    assert_matmul_close(torch.tensor([[inf]]), a, b)
    for wrong in (-inf, 0.0, float("nan")):
        with pytest.raises(AssertionError, match="Mismatched elements: 1 / 1"):
            assert_matmul_close(torch.tensor([[wrong]]), a, b)
    h = torch.full((1, 2), 3e38)
    assert_matmul_close(pygpukit_torch.matmul_tf32(h, h.T, precision="ieee"), h, h.T, precision="ieee")
    with pytest.raises(AssertionError):
        assert_matmul_close(torch.tensor([[-inf]]), h, h.T, precision="ieee")


class Outputs(torch.nn.Module):
    def __init__(self, extra):
        super().__init__()
        self.extra = extra

    def forward(self, x):
        return {"z": x * float("nan"), "x": x, "extra": self.extra}


def test_model_helper_compares_non_tensors_and_matching_non_finite_values():
    x = torch.randn(5)
    assert_model_close(Outputs(1), Outputs(1), x)  # NaN against NaN; dict order is not compared
    with pytest.raises(AssertionError, match=r"output\['extra'\] differs"):
        assert_model_close(Outputs(1), Outputs(2), x)
