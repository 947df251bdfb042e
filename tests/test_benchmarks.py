"""The benchmark tool (`python -m benchmarks`) on the CPU: every subcommand's
help, `report` on the results files, and each measuring subcommand's tiny
CPU run (--quick --device cpu), saved and rendered."""

import json
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import __main__ as cli  # noqa: E402
from benchmarks import report  # noqa: E402

MEASURING = ("matmul", "mma_sync", "accuracy", "linear", "scope", "decode", "host")


def test_entry_point_help():
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    for name in (*MEASURING, "report"):
        assert name in done.stdout


@pytest.mark.parametrize("subcommand", (*MEASURING, "report"))
def test_subcommand_help(subcommand, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([subcommand, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: python -m benchmarks {subcommand}" in capsys.readouterr().out


def test_no_subcommand_prints_usage(capsys):
    assert cli.main([]) == 2
    assert "SUBCOMMAND" in capsys.readouterr().err


def test_report_renders_the_results_files(tmp_path):
    out = tmp_path / "RESULTS.md"
    assert cli.main(["report", "--out", str(out)]) == 0
    text = out.read_text()
    assert "## How measured" in text
    for path in sorted(report.RESULTS_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        assert f"## {data['gpu']}" in text
        for section in data["sections"]:
            header = section["header"]
            assert set(header) == {"gpu", "date", "commit", "torch", "cuda"}
            heading = f"### {section['benchmark']} · {report.header_line(header)}"
            assert heading in text
            # The table follows its heading and command (two runs of one
            # benchmark may share a date and commit): a line per row (host:
            # per call, a column per shape).
            table = text.split(f"{heading}\n\n`python -m benchmarks {section['command']}`", 1)[1].split("\n### ", 1)[0]
            lines = [line for line in table.splitlines() if line.startswith("| ")]
            rows = {r["call"] for r in section["rows"]} if section["benchmark"] == "host" else section["rows"]
            assert len(lines) == 1 + len(rows) + (1 + len(section["block_rows"]) if "block_rows" in section else 0)
    assert "| shape (M×N×K, layout) |" in text


def test_results_md_is_generated_from_the_results_files():
    """benchmarks/RESULTS.md is what `report` writes now (rerun it after editing a results file)."""
    assert (ROOT / "benchmarks" / "RESULTS.md").read_text() == report.render()


def test_results_speak_of_the_product():
    """Dates and commits, not how the work was organised (the words spelled
    in two pieces so that this file does not hold them)."""
    words = re.compile("sess" "ion|iss" "ue [0-9]", re.IGNORECASE)
    for path in [ROOT / "benchmarks" / "RESULTS.md", *report.RESULTS_DIR.glob("*.json")]:
        assert not words.search(path.read_text()), path


def test_gpu_slug():
    assert report.gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert report.gpu_slug("NVIDIA H200") == "h200"
    assert report.gpu_slug("NVIDIA H100 PCIe") == "h100-pcie"


def test_cpu_needs_quick():
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["matmul", "--device", "cpu"])
    assert "--quick" in str(exit_info.value.code)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["host", "--device", "cpu", "--quick", "--save"])
    assert "FILE" in str(exit_info.value.code)


def test_tiny_cpu_runs_save_and_render(tmp_path, capsys):
    results = tmp_path / "results"
    saved = results / "cpu.json"
    for subcommand in MEASURING:
        assert cli.main([subcommand, "--quick", "--device", "cpu", "--save", str(saved)]) == 0
    assert "| square 64x64x64 nn |" in capsys.readouterr().out  # the printed table
    data = json.loads(saved.read_text())
    assert [s["benchmark"] for s in data["sections"]] == list(MEASURING)
    # The same command again replaces its section instead of adding one.
    assert cli.main(["host", "--quick", "--device", "cpu", "--save", str(saved)]) == 0
    assert len(json.loads(saved.read_text())["sections"]) == len(MEASURING)
    out = tmp_path / "RESULTS.md"
    assert cli.main(["report", "--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    for subcommand in MEASURING:
        assert re.search(rf"^### {subcommand} · \d{{4}}-\d\d-\d\d · CPU · torch ", text, re.MULTILINE)
    assert "| square 64x64x64 nn |" in text
    assert "| `torch.matmul (TF32)` |" in text


def test_mma_sync_table_with_cutlass_peer():
    """The peer's columns and both geometric means, from a section shaped as a GPU run writes it."""
    row = {"M": 4096, "N": 4096, "K": 4096, "layout": "nt", "cutlass_config": "128x256x32 warps 64x64x32 stages 3",
           "tflops": {"pygpukit mma_sync": 200.0, "cuBLAS tf32": 400.0, "CUTLASS sm80": 250.0},
           "rel_err": {"pygpukit mma_sync": 2.9e-4, "cuBLAS tf32": 2.9e-4}}
    lone = {**row, "layout": "nn", "tflops": {"pygpukit mma_sync": 100.0, "cuBLAS tf32": 400.0}}
    section = {"benchmark": "mma_sync", "command": "mma_sync --cutlass",
               "header": {"gpu": "G", "date": "2026-12-07", "commit": "abc1234", "torch": "2", "cuda": "13"},
               "rows": [row, lone]}
    text = "\n".join(report.render_section(section))
    assert "| 4096x4096x4096 nt | 200.0 | 400.0 | 250.0 | 128x256x32 warps 64x64x32 stages 3 | 0.80 | 0.50 |" in text
    assert "| 4096x4096x4096 nn | 100.0 | 400.0 | — | — | — | 0.25 |" in text
    assert "ours / cuBLAS TF32: **0.354**" in text  # sqrt(0.5 * 0.25)
    assert "ours / CUTLASS sm80 best: **0.800**" in text


def test_mma_sync_cutlass_needs_gpu():
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["mma_sync", "--quick", "--device", "cpu", "--cutlass", "/nonexistent"])
    assert "GPU" in str(exit_info.value.code)


def test_readme_status_table_is_generated_from_the_results_files():
    """README.md's status table is what `report` writes now (rerun it after a benchmark run with --save)."""
    from benchmarks import status
    readme = (ROOT / "README.md").read_text()
    assert status.render_status() in readme


def test_status_rows_follow_the_sections_present(tmp_path):
    """A row per section kind that exists, the newest of its kind, with its GPU and date; none for the rest."""
    from benchmarks import status
    header = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-07", "commit": "abc1234", "torch": "2", "cuda": "13"}
    row = {"M": 4096, "N": 4096, "K": 4096, "layout": "nt", "cutlass_config": "c",
           "tflops": {"pygpukit mma_sync": 200.0, "cuBLAS tf32": 400.0, "CUTLASS sm80": 250.0},
           "rel_err": {"pygpukit mma_sync": 3e-4, "cuBLAS tf32": 3e-4}}
    older = {"benchmark": "mma_sync", "command": "mma_sync", "header": {**header, "date": "2026-12-01"},
             "rows": [{**row, "tflops": {"pygpukit mma_sync": 100.0, "cuBLAS tf32": 400.0}}]}
    newer = {"benchmark": "mma_sync", "command": "mma_sync --cutlass", "header": header, "rows": [row]}
    report.save_section(tmp_path / "h100.json", older)
    report.save_section(tmp_path / "h100.json", newer)
    rows = status.status_rows(tmp_path)
    assert rows == [("portable `mma.sync` path (sm_80–sm_89), large shapes",
                     "200 TFLOP/s forced; geometric means 0.50× cuBLAS TF32, 0.80× CUTLASS's best sm80 kernel",
                     "H100, 2026-12-07")]
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{status.STATUS_BEGIN}\nold\n{status.STATUS_END}\nrest\n")
    assert status.update_readme(readme, tmp_path)
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("\nrest\n") and "old" not in text
    assert "| portable `mma.sync` path (sm_80–sm_89), large shapes |" in text
    (tmp_path / "plain.md").write_text("no markers\n")
    assert not status.update_readme(tmp_path / "plain.md", tmp_path)


def test_accuracy_status_names_the_cases_above_cublas(tmp_path):
    from benchmarks import status
    header = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-07", "commit": None, "torch": "2", "cuda": "13"}

    def row(case, ours):
        return {"case": case, "M": 8, "N": 8, "K": 8, "norm": {"cuBLAS fp32": 1e-7, "pygpukit tf32x3": ours},
                "worst": {"cuBLAS fp32": 1e-8, "pygpukit tf32x3": 1e-9}, "nonfinite_ok": {"cuBLAS fp32": True,
                "pygpukit tf32x3": True}, "kernels": {"tf32x3": "k"}}
    report.save_section(tmp_path / "h100.json", {"benchmark": "accuracy", "command": "accuracy", "header": header,
                                                 "rows": [row("easy", 5e-8), row("subnormal", 3e-3)]})
    assert status.status_rows(tmp_path) == [
        ("error at most cuBLAS FP32's, norm-wise and in the worst element, on the accuracy suite's cases",
         "`tf32x3` 1 of 2 (not: subnormal)", "H100, 2026-12-07")]
    text = "\n".join(report.render_section(json.loads((tmp_path / "h100.json").read_text())["sections"][0]))
    assert "| subnormal | 8×8×8 | 1.0e-07 / 1.0e-08 | 3.0e-03 / 1.0e-09 | **no** | cuBLAS yes, tf32x3 yes | k |" in text


def test_scope_status_row(tmp_path):
    from benchmarks import status
    header = {"gpu": "NVIDIA H200", "date": "2026-12-08", "commit": None, "torch": "2", "cuda": "13"}
    rows = [{"model": "Llama block", "batch": b, "tokens": t, "ms": {"pygpukit enable": 1.0, "torch tf32": s,
             "torch fp32": 3.0}, "speedup": {"vs TF32": s, "vs FP32": 3.0}, "rel_err": {}, "routed": 7, "passed": {}}
            for b, t, s in ((1, 128, 1.1), (4, 2048, 1.02))]
    report.save_section(tmp_path / "h200.json", {"benchmark": "scope", "command": "scope", "header": header,
                                                 "rows": rows})
    assert status.status_rows(tmp_path) == [
        ("Llama block, unchanged inside `enable()`",
         "1×128 tokens 1.10×, 4×2048 tokens 1.02× torch TF32 (7 products per forward on pygpukit)", "H200, 2026-12-08")]


def test_fp32_accurate_speed_status_rows(tmp_path):
    from benchmarks import status
    header = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-08", "commit": None, "torch": "2", "cuda": "13"}

    def row(kind, m, n, k, tf32x3, fp32):
        return {"kind": kind, "M": m, "N": n, "K": k, "layout": "nn", "kernel": "k",
                "tflops": {"pygpukit tf32": 350.0, "cuBLAS tf32": 350.0, "cuBLAS fp32": 50.0,
                           "pygpukit tf32x3": tf32x3, "pygpukit fp32": fp32}}
    rows = [row("square", 4096, 4096, 4096, 85.0, 75.0), row("square", 8192, 8192, 8192, 90.0, 100.0),
            row("square", 16384, 16384, 16384, 60.0, 120.0), row("llm", 8192, 4096, 14336, 88.0, 105.0),
            row("decode", 16, 4096, 4096, 15.0, 10.0)]
    report.save_section(tmp_path / "h100.json", {"benchmark": "matmul", "command": "matmul --tf32x3 --fp32",
                                                 "header": header, "rows": rows})
    found = {case: text for case, text, _ in status.status_rows(tmp_path)}
    assert found["3xTF32 (`precision=\"tf32x3\"`): docs/precision.md"] == (
        "1.70–1.80× cuBLAS FP32 from 4096³ to 8192³ and on the LLM shapes (16384³: 1.20×)")
    assert found["FP32-accurate (`precision=\"fp32\"`, Ozaki scheme on Hopper)"] == (
        "1.50–2.10× cuBLAS FP32 from 4096³ to 8192³ and on the LLM shapes (16384³: 2.40×)")
