"""Property-based fuzzing of shapes, layouts, offsets and batch broadcasting."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from conftest import DEVICES, assert_matmul_close, poisoned_matmul


def _matrix(rows, cols, transposed, offset, device, batch=()):
    """rows x cols view, optionally transposed storage and a base-pointer offset."""
    shape = batch + ((cols, rows) if transposed else (rows, cols))
    flat = torch.randn(torch.Size(shape).numel() + offset, device=device)
    x = flat[offset:].view(shape)
    return x.mT if transposed else x


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 70), ta=st.booleans(), tb=st.booleans(),
       oa=st.integers(0, 3), ob=st.integers(0, 3),
       batch=st.sampled_from([(), (2,), (3, 1)]), b_batched=st.booleans())
def test_fuzz_shapes_layouts_offsets(device, m, n, k, ta, tb, oa, ob, batch, b_batched):
    a = _matrix(m, k, ta, oa, device, batch)
    b = _matrix(k, n, tb, ob, device, batch if b_batched else ())
    assert_matmul_close(poisoned_matmul(a, b), a, b)
