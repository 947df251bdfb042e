"""scope: whole models run unchanged inside pygpukit_torch.enable(), against
the same models on torch in TF32 and in FP32, in one run.

Models: a BERT with all-MiniLM-L6-v2's architecture and random weights
(transformers' eager attention, so attention's q @ kᵀ and p @ v are Python
products the scope routes too; skipped without transformers) and the
Llama-3-8B-sized decoder block of `linear` (pygpukit_torch.testing.LlamaBlock,
whose attention is F.scaled_dot_product_attention: only its projections are
routed). Forward passes in inference mode, the variants taking turns
(torch.utils.benchmark); the error is against the float64 model on the same
input; "routed" counts the products one forward sent to pygpukit's ops.

    python -m benchmarks scope [--quick] [--min-run-time SECONDS] [--markdown OUT.md] [--save [FILE]]
"""

import copy

import torch

import pygpukit_torch
from pygpukit_torch.testing import LlamaBlock, cublas_tf32, rel_error

from ._common import add_common_arguments, pick_device, publish, run_header, time_interleaved
from .bench_linear import LLAMA_8B, TINY_BLOCK

VARIANTS = ("pygpukit enable", "torch tf32", "torch fp32")
MINILM = {"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
          "intermediate_size": 1536, "max_position_embeddings": 512}
TINY_BERT = {"vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 128, "max_position_embeddings": 64}


def bert(config, device):
    """A BERT with random weights and eager attention, or None without transformers."""
    try:
        from transformers import BertConfig, BertModel
    except ImportError:
        return None
    torch.manual_seed(0)
    return BertModel(BertConfig(**config, attn_implementation="eager")).to(device).eval()


def models(device, quick):
    """[(name, model, [(batch, tokens)], input maker)]."""
    cpu = device == "cpu"
    out = []
    net = bert(TINY_BERT if cpu else MINILM, device)
    if net is None:
        print("transformers is not installed: the BERT rows are left out")
    else:
        vocab = net.config.vocab_size

        def ids(batch, tokens):
            return torch.randint(0, vocab, (batch, tokens), device=device, generator=torch.Generator(
                device=device).manual_seed(1))
        shapes = [(2, 16)] if cpu else [(32, 128)] if quick else [(32, 128), (8, 512)]
        out.append(("BERT, all-MiniLM-L6-v2's shape" if not cpu else "BERT, tiny", net, shapes, ids))
    config = TINY_BLOCK if cpu else LLAMA_8B
    torch.manual_seed(0)
    block = LlamaBlock(**config).to(device).eval()

    def hidden(batch, tokens):
        return torch.randn(batch, tokens, config["dim"], device=device,
                           generator=torch.Generator(device=device).manual_seed(1))
    shapes = [(1, 8)] if cpu else [(1, 128)] if quick else [(1, 128), (4, 2048)]
    out.append(("Llama-3-8B-sized decoder block" if not cpu else "Llama-style block, tiny", block, shapes, hidden))
    return out


def output(result):
    """The tensor a model returns (BERT: last_hidden_state)."""
    return result.last_hidden_state if hasattr(result, "last_hidden_state") else result


def add_arguments(parser):
    parser.add_argument("--quick", action="store_true", help="one input size per model")
    add_common_arguments(parser, min_run_time=1.0)


def command(args) -> str:
    return "scope" + (" --quick" if args.quick else "")


def run(args) -> int:
    device = pick_device(args)
    header = run_header(device)
    rows = []
    for name, model, shapes, make_input in models(device, args.quick):
        reference = copy.deepcopy(model).double()
        for batch, tokens in shapes:
            x = make_input(batch, tokens)
            with torch.inference_mode():
                ref = output(reference(x if not x.is_floating_point() else x.double()))
                with pygpukit_torch.enable(devices=(device,)) as stats:
                    ours = output(model(x))
                err = {"pygpukit enable": rel_error(ours, ref)}
                for variant, tf32 in (("torch tf32", True), ("torch fp32", False)):
                    with cublas_tf32(tf32):
                        err[variant] = rel_error(output(model(x)), ref)
                variants = {
                    "pygpukit enable": (model, lambda: pygpukit_torch.enable(devices=(device,))),
                    "torch tf32": (model, lambda: cublas_tf32(True)),
                    "torch fp32": (model, lambda: cublas_tf32(False)),
                }
                measured = time_interleaved(variants, [(x,)], f"{name} forward", f"{batch}x{tokens}",
                                            len(variants) * args.min_run_time)
            ms = {v: measured[v].median * 1e3 for v in VARIANTS}
            rows.append({"model": name, "batch": batch, "tokens": tokens, "ms": ms,
                         "speedup": {"vs TF32": ms["torch tf32"] / ms["pygpukit enable"],
                                     "vs FP32": ms["torch fp32"] / ms["pygpukit enable"]},
                         "rel_err": err, "routed": stats.taken, "passed": dict(stats.passed)})
            print(f"{name} {batch}x{tokens}: " + "  ".join(f"{v} {ms[v]:.3f} ms (err {err[v]:.1e})" for v in VARIANTS)
                  + f"  [{stats.summary()}]", flush=True)
    publish(args, {"benchmark": "scope", "command": command(args), "header": header, "rows": rows})
    return 0
