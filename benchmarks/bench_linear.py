"""linear: pygpukit linear_tf32 with fused bias + GELU against torch's
F.gelu(F.linear(x, w, b)) in TF32 and in FP32, measured in the same run; and
a Llama-style block's forward (float32) swapped by swap_linear_ against the
same block unswapped.

Timing as in bench_matmul.py: torch.utils.benchmark medians, the layer
variants taking turns block by block, inputs and weights rotated past the L2 cache (each layer's weight
comes from HBM, as in a model with many layers). TFLOP/s = 2·M·N·K / t
(the epilogue's work is not counted). Accuracy: ‖out − ref‖/‖ref‖ against
the float64 computation on the same inputs.

    python -m benchmarks linear [--quick] [--min-run-time SECONDS] [--markdown OUT.md] [--save [FILE]]
"""

import contextlib

import torch
import torch.nn.functional as F
import torch.utils.benchmark as benchmark

import pygpukit_torch
from pygpukit_torch.testing import LlamaBlock, cublas_tf32, rel_error

from ._common import add_common_arguments, pick_device, publish, rotation_count, run_header, time_interleaved

M_VALUES = (1, 16, 128, 2048, 8192)
FEATURES = ((4096, 4096), (4096, 14336), (14336, 4096))  # (in, out): Llama-3-8B projections
BLOCK_TOKENS = ((1, 1), (1, 128), (4, 2048))  # (batch, tokens per sequence)
LLAMA_8B = {"dim": 4096, "heads": 32, "kv_heads": 8, "hidden": 14336}
# --quick without a GPU: tiny sizes that run the tool, not the kernels.
CPU_FEATURES, CPU_M, CPU_TOKENS = ((64, 96),), (1, 16), ((1, 1), (1, 8))
TINY_BLOCK = {"dim": 64, "heads": 4, "kv_heads": 2, "hidden": 128}

# name -> (function, torch's TF32 setting or None when torch.matmul is not used)
VARIANTS = {
    "pygpukit fused": (lambda x, w, b: pygpukit_torch.linear_tf32(x, w, b, "gelu"), None),
    "pygpukit + F.gelu": (lambda x, w, b: F.gelu(pygpukit_torch.linear_tf32(x, w, b)), None),
    "torch tf32": (lambda x, w, b: F.gelu(F.linear(x, w, b)), True),
    "torch fp32": (lambda x, w, b: F.gelu(F.linear(x, w, b)), False),
}


def tf32_setting(enabled):
    return cublas_tf32(enabled) if enabled is not None else contextlib.nullcontext()


def bench_layers(shapes, results, device, min_run_time):
    """One row per (M, in, out): TFLOP/s and error of every variant."""
    rows = []
    for m, (k, n) in shapes:
        sets = [(torch.randn(m, k, device=device), torch.randn(n, k, device=device) / k ** 0.5,
                 torch.randn(n, device=device)) for _ in range(rotation_count(4 * (m * k + n * k + n), device))]
        x, w, b = sets[0]
        ref = F.gelu(F.linear(x.double(), w.double(), b.double()))
        sub = f"M={m} {k}->{n}"
        tflops, err = {}, {}
        timed = {name: (fn, lambda tf32=tf32: tf32_setting(tf32)) for name, (fn, tf32) in VARIANTS.items()}
        measured = time_interleaved(timed, sets, "linear + bias + GELU", sub, len(timed) * min_run_time)
        for name, (fn, context) in timed.items():
            with context():
                err[name] = rel_error(fn(x, w, b), ref)
            r = measured[name]
            results.append(r)
            tflops[name] = 2 * m * n * k / r.median / 1e12
        info = pygpukit_torch.kernel_info(x, w.mT)
        rows.append({"M": m, "in": k, "out": n, "kernel": info, "tflops": tflops,
                     "ratio": {"fused / torch TF32": tflops["pygpukit fused"] / tflops["torch tf32"],
                               "fused / torch FP32": tflops["pygpukit fused"] / tflops["torch fp32"]},
                     "rel_err": {"pygpukit fused": err["pygpukit fused"], "torch tf32": err["torch tf32"]}})
        print(f"{sub:22s} " + "  ".join(f"{name} {tflops[name]:6.1f} (err {err[name]:.1e})" for name in VARIANTS)
              + f"  [{info}]", flush=True)
        del sets, ref
    return rows


def bench_block(token_shapes, results, device, config, min_run_time):
    """One row per (batch, tokens): forward time of the Llama-style block
    swapped (pygpukit; attention then runs with torch's default settings)
    and unswapped (all of torch in TF32 / in FP32)."""
    torch.manual_seed(0)
    block = LlamaBlock(**config).to(device).eval()
    reference = LlamaBlock(**config).to(device).double().eval()
    reference.load_state_dict(block.state_dict())
    rows = []
    for batch, tokens in token_shapes:
        x = torch.randn(batch, tokens, config["dim"], device=device)
        sub = f"{batch}x{tokens} tokens"
        ms, err = {}, {}
        with torch.inference_mode():
            ref = reference(x.double())
            for name, swapped, tf32 in (("pygpukit swapped", True, None), ("torch tf32", False, True),
                                        ("torch fp32", False, False)):
                swap = pygpukit_torch.swapped_linear(block) if swapped else contextlib.nullcontext(block)
                with swap as model, tf32_setting(tf32):
                    err[name] = rel_error(model(x), ref)
                    r = benchmark.Timer(stmt="model(x)", globals={"model": model, "x": x},
                                        label="Llama-style block forward", sub_label=sub,
                                        description=name).blocked_autorange(min_run_time=min_run_time)
                results.append(r)
                ms[name] = r.median * 1e3
        rows.append({"batch": batch, "tokens": tokens, "ms": ms,
                     "speedup": {"vs TF32": ms["torch tf32"] / ms["pygpukit swapped"],
                                 "vs FP32": ms["torch fp32"] / ms["pygpukit swapped"]}, "rel_err": err})
        print(f"{sub:22s} " + "  ".join(f"{name} {ms[name]:8.3f} ms (err {err[name]:.1e})" for name in ms),
              flush=True)
    return rows


def add_arguments(parser):
    parser.add_argument("--quick", action="store_true", help="M in {1, 128, 8192}, 4096->4096 only, two block sizes")
    add_common_arguments(parser, min_run_time=1.0)


def command(args) -> str:
    return "linear" + (" --quick" if args.quick else "")


def run(args) -> int:
    device = pick_device(args)
    header = run_header(device)
    config = LLAMA_8B
    if device == "cpu":
        shapes, tokens, config = [(m, f) for f in CPU_FEATURES for m in CPU_M], CPU_TOKENS, TINY_BLOCK
    elif args.quick:
        shapes = [(m, FEATURES[0]) for m in (1, 128, 8192)]
        tokens = BLOCK_TOKENS[:2]
    else:
        shapes = [(m, f) for f in FEATURES for m in M_VALUES]
        tokens = BLOCK_TOKENS
    results = []
    layer_rows = bench_layers(shapes, results, device, args.min_run_time)
    block_rows = bench_block(tokens, results, device, config, args.min_run_time)
    benchmark.Compare(results).print()
    publish(args, {"benchmark": "linear", "command": command(args), "header": header, "block": config,
                   "rows": layer_rows, "block_rows": block_rows})
    return 0
