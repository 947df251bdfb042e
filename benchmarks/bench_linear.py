"""pygpukit linear_tf32 with fused bias + GELU against torch's
F.gelu(F.linear(x, w, b)) in TF32 and in FP32, measured in the same run; and
a Llama-style block's forward (float32) swapped by swap_linear_ against the
same block unswapped.

Timing as in bench_matmul.py: torch.utils.benchmark medians, the layer
variants taking turns block by block, inputs and weights rotated past the L2 cache (each layer's weight
comes from HBM, as in a model with many layers). TFLOP/s = 2·M·N·K / t
(the epilogue's work is not counted). Accuracy: ‖out − ref‖/‖ref‖ against
the float64 computation on the same inputs.

    python benchmarks/bench_linear.py [--quick] [--markdown OUT.md]
"""

import argparse
import contextlib

import torch
import torch.nn.functional as F
import torch.utils.benchmark as benchmark

import pygpukit_torch
from _common import append_markdown, markdown_table, rotation_count, run_header, time_interleaved
from pygpukit_torch.testing import LlamaBlock, cublas_tf32, rel_error

DEVICE = "cuda"
M_VALUES = (1, 16, 128, 2048, 8192)
FEATURES = ((4096, 4096), (4096, 14336), (14336, 4096))  # (in, out): Llama-3-8B projections
BLOCK_TOKENS = ((1, 1), (1, 128), (4, 2048))  # (batch, tokens per sequence)
LLAMA_8B = {"dim": 4096, "heads": 32, "kv_heads": 8, "hidden": 14336}

# name -> (function, torch's TF32 setting or None when torch.matmul is not used)
VARIANTS = {
    "pygpukit fused": (lambda x, w, b: pygpukit_torch.linear_tf32(x, w, b, "gelu"), None),
    "pygpukit + F.gelu": (lambda x, w, b: F.gelu(pygpukit_torch.linear_tf32(x, w, b)), None),
    "torch tf32": (lambda x, w, b: F.gelu(F.linear(x, w, b)), True),
    "torch fp32": (lambda x, w, b: F.gelu(F.linear(x, w, b)), False),
}


def tf32_setting(enabled):
    return cublas_tf32(enabled) if enabled is not None else contextlib.nullcontext()


def bench_layers(shapes, results):
    """One table row per (M, in, out): TFLOP/s and error of every variant."""
    rows = []
    for m, (k, n) in shapes:
        sets = [(torch.randn(m, k, device=DEVICE), torch.randn(n, k, device=DEVICE) / k ** 0.5,
                 torch.randn(n, device=DEVICE)) for _ in range(rotation_count(4 * (m * k + n * k + n)))]
        x, w, b = sets[0]
        ref = F.gelu(F.linear(x.double(), w.double(), b.double()))
        sub = f"M={m} {k}->{n}"
        row = {}
        timed = {name: (fn, lambda tf32=tf32: tf32_setting(tf32)) for name, (fn, tf32) in VARIANTS.items()}
        measured = time_interleaved(timed, sets, "linear + bias + GELU", sub, len(timed))
        for name, (fn, context) in timed.items():
            with context():
                err = rel_error(fn(x, w, b), ref)
            r = measured[name]
            results.append(r)
            row[name] = (2 * m * n * k / r.median / 1e12, err)
        info = pygpukit_torch.kernel_info(x, w.mT)
        rows.append((sub, row, info))
        print(f"{sub:22s} " + "  ".join(f"{name} {v[0]:6.1f} (err {v[1]:.1e})" for name, v in row.items())
              + f"  [{info}]", flush=True)
        del sets, ref
    return rows


def bench_block(token_shapes, results):
    """One table row per (batch, tokens): forward time of the Llama-3-8B-sized
    block swapped (pygpukit; attention then runs with torch's default
    settings) and unswapped (all of torch in TF32 / in FP32)."""
    torch.manual_seed(0)
    block = LlamaBlock(**LLAMA_8B).to(DEVICE).eval()
    reference = LlamaBlock(**LLAMA_8B).to(DEVICE).double().eval()
    reference.load_state_dict(block.state_dict())
    rows = []
    for batch, tokens in token_shapes:
        x = torch.randn(batch, tokens, LLAMA_8B["dim"], device=DEVICE)
        sub = f"{batch}x{tokens} tokens"
        with torch.inference_mode():
            ref = reference(x.double())
            row = {}
            for name, swapped, tf32 in (("pygpukit swapped", True, None), ("torch tf32", False, True),
                                        ("torch fp32", False, False)):
                swap = pygpukit_torch.swapped_linear(block) if swapped else contextlib.nullcontext(block)
                with swap as model, tf32_setting(tf32):
                    err = rel_error(model(x), ref)
                    r = benchmark.Timer(stmt="model(x)", globals={"model": model, "x": x},
                                        label="Llama-3-8B-sized block forward", sub_label=sub,
                                        description=name).blocked_autorange(min_run_time=1.0)
                results.append(r)
                row[name] = (r.median * 1e3, err)
        rows.append((sub, row))
        print(f"{sub:22s} " + "  ".join(f"{name} {v[0]:8.3f} ms (err {v[1]:.1e})" for name, v in row.items()),
              flush=True)
    return rows


def markdown(header, layer_rows, block_rows):
    layer_cells = []
    for sub, row, info in layer_rows:
        o, u, t, f = (row[k] for k in VARIANTS)
        layer_cells.append([sub, f"{o[0]:.1f}", f"{u[0]:.1f}", f"{t[0]:.1f}", f"{f[0]:.1f}", f"{o[0] / t[0]:.2f}",
                            f"{o[0] / f[0]:.2f}", f"{o[1]:.2e}", f"{t[1]:.2e}", info])
    block_cells = []
    for sub, row in block_rows:
        s, t, f = row["pygpukit swapped"], row["torch tf32"], row["torch fp32"]
        block_cells.append([sub, f"{s[0]:.3f}", f"{t[0]:.3f}", f"{f[0]:.3f}", f"{t[0] / s[0]:.2f}",
                            f"{f[0] / s[0]:.2f}", f"{s[1]:.2e}", f"{t[1]:.2e}", f"{f[1]:.2e}"])
    lines = ([f"### linear_tf32 · {header}", "",
              "GELU(x @ Wᵀ + b), TFLOP/s (2·M·N·K / t). Ratios: fused pygpukit over torch in the same run.", ""]
             + markdown_table(["M, in→out", "pygpukit fused", "pygpukit + F.gelu", "torch TF32", "torch FP32",
                               "fused / torch TF32", "fused / torch FP32", "rel. err fused", "rel. err torch TF32",
                               "kernel"], layer_cells)
             + ["", f"Llama-3-8B-sized block ({LLAMA_8B}), float32 forward, ms; speedup = torch time / ours.", ""]
             + markdown_table(["batch x tokens", "pygpukit swapped", "torch TF32", "torch FP32", "speedup vs TF32",
                               "speedup vs FP32", "rel. err swapped", "rel. err TF32", "rel. err FP32"],
                              block_cells))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="M in {1, 128, 8192}, 4096->4096 only, two block sizes")
    parser.add_argument("--markdown", help="append the results tables to this file")
    args = parser.parse_args()

    header = run_header()
    print(header)
    if args.quick:
        shapes = [(m, FEATURES[0]) for m in (1, 128, 8192)]
        tokens = BLOCK_TOKENS[:2]
    else:
        shapes = [(m, f) for f in FEATURES for m in M_VALUES]
        tokens = BLOCK_TOKENS
    results = []
    layer_rows = bench_layers(shapes, results)
    block_rows = bench_block(tokens, results)
    benchmark.Compare(results).print()
    table = markdown(header, layer_rows, block_rows)
    print(table)
    append_markdown(args.markdown, table)


if __name__ == "__main__":
    main()
