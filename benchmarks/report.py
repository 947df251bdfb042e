"""The results files and benchmarks/RESULTS.md rendered from them.

Pure Python (no torch): `python -m benchmarks report` works on any machine.

benchmarks/results/<gpu>.json holds the newest run of each benchmark
command on one GPU (h200.json, h100.json; the name comes from the GPU's,
see `gpu_slug`):

    {"gpu": "NVIDIA H200",
     "sections": [
      {"benchmark": "matmul",                          # the subcommand that measured it
       "command": "matmul --tf32x3 --kernels auto,mma_sync",   # what was run; identifies the section
       "header": {"gpu": "NVIDIA H200", "date": "2026-12-03", "commit": "494d325",  # null where unknown
                  "torch": "2.11.0+cu130", "cuda": "13.0"},
       "note": "...",                                  # optional: how this run differs from the usual method
       "rows": [...],                                  # one per shape, fields per benchmark (below)
       "block_rows": [...]}]}                          # linear only

A subcommand run with --save replaces the section of the same command (or
adds it), so each table holds one run: one date, one commit.

Rows, by benchmark (times are medians; matmul's ratios are computed here
from its TFLOP/s, the other benchmarks store the ratios computed from the
unrounded times when they were measured):
  matmul  kind, M, N, K, layout ("nt": A row-major, B transposed), kernel (the
          automatic choice in TF32), optional kernels {precision: kernel},
          tflops {variant: TFLOP/s}, optional rel_err {variant: error}. Variants:
          "pygpukit tf32", "cuBLAS tf32", "cuBLAS fp32", "pygpukit tf32x3",
          "pygpukit fp32", "pygpukit ieee", "pygpukit <forced kernel>".
  linear  M, in, out, kernel, tflops {variant}, ratio {"fused / torch TF32",
          "fused / torch FP32"}, rel_err {"pygpukit fused", "torch tf32"};
          block_rows: batch, tokens, ms {variant}, speedup {"vs TF32",
          "vs FP32"}, rel_err {variant}.
  decode  M, N, K, us {"ours x @ W", "ours x @ Wt.T", "cuBLAS x @ W",
          "cuBLAS x @ Wt.T"}, ratio {"x @ W", "x @ Wt.T"} (cuBLAS time /
          ours), weight_GBps (ours, x @ W), rel_err (x @ W), kernel (x @ W).
  host    shape ("MxKxN"), call, us.
  scope   model, batch, tokens, ms {"pygpukit enable", "torch tf32", "torch fp32"},
          speedup {"vs TF32", "vs FP32"} (torch's time / ours), rel_err {variant},
          routed (products one forward sent to pygpukit), passed {reason: count}.
  mma_sync  M, N, K, layout, tflops {"pygpukit mma_sync" (forced), "cuBLAS tf32",
          optional "CUTLASS sm80" (its best configuration)}, rel_err
          {"pygpukit mma_sync", "cuBLAS tf32"}, optional cutlass_config.
  accuracy  case, M, N, K, norm {variant: error}, worst {variant: error},
          nonfinite_ok {variant: bool}, kernels {precision: kernel}. Variants:
          "cuBLAS fp32", "pygpukit tf32x3", "pygpukit fp32", "pygpukit ieee",
          optional "pygpukit fp32 ozaki" (the Ozaki method forced).
"""

import argparse
import json
import math
import pathlib
import re

HERE = pathlib.Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
RESULTS_MD = HERE / "RESULTS.md"
BENCHMARKS = ("matmul", "mma_sync", "accuracy", "linear", "scope", "decode", "host")

# The headline shape set (kind, M, N, K, layout): a matmul table holding all
# of it ends with the geometric mean of the ratios to cuBLAS TF32 over it.
TARGET_SET = [("square", 4096, 4096, 4096, "nn"), ("square", 8192, 8192, 8192, "nn"),
              ("square", 16384, 16384, 16384, "nn"), ("llm", 8192, 14336, 4096, "nn"),
              ("llm", 8192, 4096, 14336, "nn")]
TARGET_NAMES = "4096³, 8192³, 16384³, 8192×14336×4096, 8192×4096×14336"

HOW_MEASURED = """\
Every number is a median of `torch.utils.benchmark` timings, CUDA-synchronized,
taken after a warm-up call; the variants of a shape take turns block by block
(five rounds) so that clock drift hits them alike, and each call takes the next
of several input sets whose total size exceeds three times the L2 cache, so
that small shapes are not timed out of L2. TFLOP/s = 2·M·N·K / t. Every ratio
to cuBLAS (`torch.matmul` / `F.linear` with TF32 allowed, or in full FP32)
compares timings of the same run on the same GPU. Relative error =
‖out − ref‖ / ‖ref‖ against the float64 product of the same inputs. Layout
letters are A then B: "n" row-major, "t" a transposed view (column-major);
"nt" is `F.linear`'s `x @ W.T`. Each table holds one run; its heading names
the date, GPU, torch, CUDA and the commit measured ("unknown" where it was not
recorded). Commands are `python -m benchmarks <command>` (docs/benchmarks.md)."""

DESCRIPTIONS = {
    "matmul": "`matmul_tf32` against `torch.matmul` (cuBLAS) in TF32 and FP32, TFLOP/s.",
    "linear": "`linear_tf32` with fused bias + GELU against torch's `F.gelu(F.linear(x, w, b))`, "
              "TFLOP/s (the epilogue's work is not counted); then a Llama-style block's "
              "float32 forward, swapped against unswapped, ms (speedup = torch's time / ours).",
    "decode": "Decode-sized products with the weight stored [in, out] (`x @ W`) and [out, in] "
              "(`x @ Wt.T`, nn.Linear's), µs per call with host time, against cuBLAS TF32.",
    "host": "Host time per call of tiny products (the GPU's work is negligible), µs.",
    "scope": "Whole models unchanged inside `pygpukit_torch.enable()` against the same models on torch in "
             "TF32 and FP32: forward time, ms (speedup = torch's time / ours), error against the float64 "
             "model, and the products one forward routed to pygpukit.",
    "accuracy": "The FP32-accurate precisions against cuBLAS FP32 on hard inputs: norm-wise error "
                "‖out − ref‖/‖ref‖ and the worst element |out − ref| / (|A|·|B|) against the float64 "
                "product; \"≤ FP32\" says whether both are at most cuBLAS FP32's.",
    "mma_sync": "The portable `mma.sync` kernel (the path of sm_80–sm_89 GPUs) forced, against cuBLAS "
                "TF32 and CUTLASS 2.x's sm80 TF32 kernels (best of six tile configurations, each timed "
                "with CUDA events in its own process), TFLOP/s.",
}


# ---- the results files --------------------------------------------------------------------------

def gpu_slug(name: str) -> str:
    """The results file's name for a GPU: "NVIDIA H100 80GB HBM3" -> "h100",
    "NVIDIA H200" -> "h200", "NVIDIA H100 PCIe" -> "h100-pcie"."""
    words = []
    for word in name.split():
        if word.upper() == "NVIDIA":
            continue
        if re.fullmatch(r"\d+GB", word, re.IGNORECASE):
            break
        words.append(re.sub(r"[^a-z0-9]+", "-", word.lower()).strip("-"))
    return "-".join(w for w in words if w) or "gpu"


def results_path(gpu: str) -> pathlib.Path:
    return RESULTS_DIR / f"{gpu_slug(gpu)}.json"


def load(path) -> dict:
    with open(path) as fh:
        return json.load(fh)


def save_section(path, section: dict) -> None:
    """Writes `section` into the results file at `path` (created if need be),
    replacing the section of the same benchmark and command."""
    path = pathlib.Path(path)
    data = load(path) if path.exists() else {"gpu": section["header"]["gpu"], "sections": []}
    key = (section["benchmark"], section["command"])
    for i, old in enumerate(data["sections"]):
        if (old["benchmark"], old["command"]) == key:
            data["sections"][i] = section
            break
    else:
        data["sections"].append(section)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        json.dump(data, fh, indent=1, ensure_ascii=False)
        fh.write("\n")


# ---- Markdown -----------------------------------------------------------------------------------

def markdown_table(columns, rows) -> list:
    """The lines of a Markdown table: header, separator, one line per row of cells."""
    return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])


def geomean(values) -> float:
    """Geometric mean of positive numbers (ratios to cuBLAS)."""
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def header_line(header: dict) -> str:
    """Date · GPU · torch · CUDA · commit: the heading of every table."""
    return (f"{header['date']} · {header['gpu']} · torch {header['torch']} · CUDA {header['cuda'] or 'none'} · "
            f"commit {header['commit'] or 'unknown'}")


def render_section(section: dict, level: str = "###") -> list:
    """The lines of one section: heading, command, description, table(s)."""
    lines = [f"{level} {section['benchmark']} · {header_line(section['header'])}", "",
             f"`python -m benchmarks {section['command']}`. {DESCRIPTIONS.get(section['benchmark'], '')}".rstrip()]
    if section.get("note"):
        lines += ["", section["note"]]
    lines.append("")
    lines += RENDERERS[section["benchmark"]](section)
    return lines


def _shape(row) -> str:
    return f"{row['kind']} {row['M']}x{row['N']}x{row['K']} {row['layout']}"


def render_matmul(section) -> list:
    rows = section["rows"]
    variants = list(rows[0]["tflops"])
    precisions = [p for p in ("tf32x3", "fp32", "ieee") if f"pygpukit {p}" in variants]
    forced = [v for v in variants if v.startswith("pygpukit ") and v[len("pygpukit "):] not in ("tf32", *precisions)]
    with_err = all("rel_err" in r for r in rows)
    with_kernels = {p for p in precisions if all(p in r.get("kernels", {}) for r in rows)}
    columns = ["shape (M×N×K, layout)", "pygpukit TF32 TFLOP/s", "cuBLAS TF32", "cuBLAS FP32", "ours / cuBLAS TF32",
               "ours / cuBLAS FP32"]
    if with_err:
        columns += ["rel. err ours", "rel. err cuBLAS TF32"]
    columns.append("kernel")
    if with_err and precisions:
        columns.append("rel. err cuBLAS FP32")
    for p in precisions:
        columns += [f"pygpukit {p} TFLOP/s", f"{p} / cuBLAS FP32"]
        columns += [f"rel. err {p}"] if with_err else []
        columns += [f"kernel {p}"] if p in with_kernels else []
    columns += [f"{v} TFLOP/s (forced)" for v in forced]
    cells = []
    for r in rows:
        t, e = r["tflops"], r.get("rel_err", {})
        o = t["pygpukit tf32"]
        cell = [_shape(r), f"{o:.1f}", f"{t['cuBLAS tf32']:.1f}", f"{t['cuBLAS fp32']:.1f}",
                f"{o / t['cuBLAS tf32']:.2f}", f"{o / t['cuBLAS fp32']:.2f}"]
        if with_err:
            cell += [f"{e['pygpukit tf32']:.2e}", f"{e['cuBLAS tf32']:.2e}"]
        cell.append(r["kernel"])
        if with_err and precisions:
            cell.append(f"{e['cuBLAS fp32']:.2e}")
        for p in precisions:
            ours = t[f"pygpukit {p}"]
            cell += [f"{ours:.1f}", f"{ours / t['cuBLAS fp32']:.2f}"]
            cell += [f"{e[f'pygpukit {p}']:.2e}"] if with_err else []
            cell += [r["kernels"][p]] if p in with_kernels else []
        cell += [f"{t[v]:.1f}" for v in forced]
        cells.append(cell)
    lines = markdown_table(columns, cells)
    by_key = {(r["kind"], r["M"], r["N"], r["K"], r["layout"]): r for r in rows}
    if all(key in by_key for key in TARGET_SET):
        for name in ["pygpukit tf32"] + forced:
            g = geomean(by_key[key]["tflops"][name] / by_key[key]["tflops"]["cuBLAS tf32"] for key in TARGET_SET)
            lines += ["", f"Geometric mean of {name} / cuBLAS TF32 over {TARGET_NAMES}: **{g:.3f}**"]
    return lines


LINEAR_VARIANTS = ("pygpukit fused", "pygpukit + F.gelu", "torch tf32", "torch fp32")
BLOCK_VARIANTS = ("pygpukit swapped", "torch tf32", "torch fp32")


def render_linear(section) -> list:
    cells = []
    for r in section["rows"]:
        t = r["tflops"]
        cells.append([f"M={r['M']} {r['in']}->{r['out']}"] + [f"{t[v]:.1f}" for v in LINEAR_VARIANTS]
                     + [f"{r['ratio']['fused / torch TF32']:.2f}", f"{r['ratio']['fused / torch FP32']:.2f}",
                        f"{r['rel_err']['pygpukit fused']:.2e}", f"{r['rel_err']['torch tf32']:.2e}", r["kernel"]])
    lines = markdown_table(["M, in→out", "pygpukit fused", "pygpukit + F.gelu", "torch TF32", "torch FP32",
                            "fused / torch TF32", "fused / torch FP32", "rel. err fused", "rel. err torch TF32",
                            "kernel"], cells)
    if section.get("block_rows"):
        block = section.get("block", {})
        cells = [[f"{r['batch']}x{r['tokens']} tokens"] + [f"{r['ms'][v]:.3f}" for v in BLOCK_VARIANTS]
                 + [f"{r['speedup']['vs TF32']:.2f}", f"{r['speedup']['vs FP32']:.2f}"]
                 + [f"{r['rel_err'][v]:.2e}" for v in BLOCK_VARIANTS] for r in section["block_rows"]]
        lines += ["", f"Llama-style block ({', '.join(f'{k}={v}' for k, v in block.items())}), "
                      "float32 forward, ms; speedup = torch time / ours.", ""]
        lines += markdown_table(["batch x tokens", "pygpukit swapped", "torch TF32", "torch FP32", "speedup vs TF32",
                                 "speedup vs FP32", "rel. err swapped", "rel. err TF32", "rel. err FP32"], cells)
    return lines


DECODE_TIMES = ("ours x @ W", "ours x @ Wt.T", "cuBLAS x @ W", "cuBLAS x @ Wt.T")


def render_decode(section) -> list:
    cells = [[r["M"], r["N"], r["K"]] + [f"{r['us'][v]:.1f}" for v in DECODE_TIMES]
             + [f"{r['ratio']['x @ W']:.2f}", f"{r['ratio']['x @ Wt.T']:.2f}", f"{r['weight_GBps']:.0f}",
                f"{r['rel_err']:.2e}", r["kernel"]] for r in section["rows"]]
    return markdown_table(["M", "N", "K"] + [f"{v} (us)" for v in DECODE_TIMES]
                          + ["cuBLAS / ours (x @ W)", "cuBLAS / ours (x @ Wt.T)", "W GB/s (ours, x @ W)",
                             "rel. err (x @ W)", "kernel (x @ W)"], cells)


def render_host(section) -> list:
    shapes = list(dict.fromkeys(r["shape"] for r in section["rows"]))
    calls = list(dict.fromkeys(r["call"] for r in section["rows"]))
    us = {(r["call"], r["shape"]): r["us"] for r in section["rows"]}
    cells = [[f"`{call}`"] + [f"{us[call, s]:.1f}" if (call, s) in us else "" for s in shapes] for call in calls]
    return markdown_table(["call (µs per call), M x K x N:"] + shapes, cells)


def render_mma_sync(section) -> list:
    rows = section["rows"]
    ours, cublas, cutlass = "pygpukit mma_sync", "cuBLAS tf32", "CUTLASS sm80"
    with_cutlass = any(cutlass in r["tflops"] for r in rows)
    columns = ["shape (M×N×K, layout)", "mma_sync TFLOP/s", "cuBLAS TF32"]
    columns += ["CUTLASS sm80 best", "CUTLASS tile", "ours / CUTLASS"] if with_cutlass else []
    columns += ["ours / cuBLAS TF32", "rel. err ours", "rel. err cuBLAS TF32"]
    cells = []
    for r in rows:
        t = r["tflops"]
        cell = [f"{r['M']}x{r['N']}x{r['K']} {r['layout']}", f"{t[ours]:.1f}", f"{t[cublas]:.1f}"]
        if with_cutlass:
            cell += ([f"{t[cutlass]:.1f}", r["cutlass_config"], f"{t[ours] / t[cutlass]:.2f}"] if cutlass in t
                     else ["—", "—", "—"])
        cell += [f"{t[ours] / t[cublas]:.2f}", f"{r['rel_err'][ours]:.2e}", f"{r['rel_err'][cublas]:.2e}"]
        cells.append(cell)
    lines = markdown_table(columns, cells)
    lines += ["", f"Geometric mean of ours / cuBLAS TF32: **{geomean(r['tflops'][ours] / r['tflops'][cublas] for r in rows):.3f}**"]
    peer_rows = [r for r in rows if cutlass in r["tflops"]]
    if peer_rows:
        g = geomean(r["tflops"][ours] / r["tflops"][cutlass] for r in peer_rows)
        lines += ["", f"Geometric mean of ours / CUTLASS sm80 best: **{g:.3f}**"]
    return lines


def render_accuracy(section) -> list:
    rows = section["rows"]
    ours = [v for v in rows[0]["norm"] if v != "cuBLAS fp32"]
    columns = ["case", "M×N×K", "cuBLAS FP32 norm / worst"]
    for v in ours:
        columns += [f"{v[len('pygpukit '):]} norm / worst", "≤ FP32"]
    columns += ["NaN/Inf right"] + [f"kernel {v[len('pygpukit '):]}" for v in ours]
    cells = []
    for r in rows:
        n, w, ok = r["norm"], r["worst"], r["nonfinite_ok"]
        cell = [r["case"], f"{r['M']}×{r['N']}×{r['K']}", f"{n['cuBLAS fp32']:.1e} / {w['cuBLAS fp32']:.1e}"]
        for v in ours:
            at_most = n[v] <= n["cuBLAS fp32"] and w[v] <= w["cuBLAS fp32"]
            cell += [f"{n[v]:.1e} / {w[v]:.1e}", "yes" if at_most else "**no**"]
        cell.append(", ".join(f"{v.replace('pygpukit ', '').replace(' fp32', '')} {'yes' if ok[v] else '**no**'}"
                              for v in ok))
        cell += [r["kernels"][v[len("pygpukit "):]] for v in ours]
        cells.append(cell)
    return markdown_table(columns, cells)


def render_scope(section) -> list:
    variants = ("pygpukit enable", "torch tf32", "torch fp32")
    columns = (["model", "batch × tokens"] + [f"{v} ms" for v in variants] + ["speedup vs TF32", "vs FP32"]
               + [f"rel. err {v}" for v in variants] + ["routed per forward", "left to torch"])
    cells = [[r["model"], f"{r['batch']}×{r['tokens']}"] + [f"{r['ms'][v]:.3f}" for v in variants]
             + [f"{r['speedup']['vs TF32']:.2f}", f"{r['speedup']['vs FP32']:.2f}"]
             + [f"{r['rel_err'][v]:.1e}" for v in variants]
             + [str(r["routed"]), ", ".join(f"{why} ({n}x)" for why, n in r["passed"].items()) or "—"]
             for r in section["rows"]]
    return markdown_table(columns, cells)


RENDERERS = {"matmul": render_matmul, "mma_sync": render_mma_sync, "accuracy": render_accuracy,
             "scope": render_scope, "linear": render_linear, "decode": render_decode, "host": render_host}


def render(results_dir=RESULTS_DIR) -> str:
    """RESULTS.md from every results file in `results_dir`."""
    lines = ["# Benchmark results", "",
             "Generated by `python -m benchmarks report` from `benchmarks/results/<gpu>.json`; "
             "a benchmark run with `--save` updates those files. Do not edit this file by hand.", "",
             "## How measured", "", HOW_MEASURED]
    files = sorted(pathlib.Path(results_dir).glob("*.json"))
    if not files:
        lines += ["", f"No results files in {results_dir}."]
    for path in files:
        data = load(path)
        lines += ["", f"## {data['gpu']}", "", f"From `benchmarks/results/{path.name}`."]
        order = {name: i for i, name in enumerate(BENCHMARKS)}
        for section in sorted(data["sections"], key=lambda s: order.get(s["benchmark"], len(order))):
            lines += [""] + render_section(section)
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", default=str(RESULTS_DIR),
                        help="folder of results files (default: benchmarks/results)")
    parser.add_argument("--out", default=str(RESULTS_MD),
                        help="Markdown file to write (default: benchmarks/RESULTS.md, and then README.md's status "
                             "table too; '-' prints it)")


def run(args) -> int:
    text = render(args.results)
    if args.out == "-":
        print(text, end="")
        return 0
    with open(args.out, "w") as fh:
        fh.write(text)
    print(f"wrote {args.out}")
    if args.out == str(RESULTS_MD) and args.results == str(RESULTS_DIR):
        from . import status  # status imports this module
        if status.update_readme():
            print(f"wrote the status table of {status.README}")
    return 0
