"""Helpers for comparing pygpukit's ops with torch in tests and benchmarks."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn


@contextlib.contextmanager
def cublas_tf32(enabled: bool):
    """Runs torch.matmul on CUDA with TF32 on (``enabled``) or off, restoring
    the caller's setting. Uses ``torch.backends.cuda.matmul.fp32_precision``
    where it exists: once it is set, the legacy ``allow_tf32`` getter raises."""
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
    """‖out − ref‖ / ‖ref‖ (Frobenius norms), computed in float64 (outside
    autograd). A zero or empty `ref` gives 0.0 where `out` equals it and inf
    where it does not (0/0 would be NaN, and ``rel_error(...) < tol`` then
    fails on a correct result).

    Raises:
        ValueError: `out` and `ref` of different shapes (broadcasting one
            against the other would hide a wrong-shaped result).
        TypeError: a complex tensor (converting it to float64 would drop its
            imaginary part).
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
