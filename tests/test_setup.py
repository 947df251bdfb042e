"""setup.py's choice of GPU targets (no build: its functions alone)."""

import importlib.util
import os
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("pygpukit_setup", os.path.join(ROOT, "setup.py"))
setup_py = importlib.util.module_from_spec(spec)
spec.loader.exec_module(setup_py)  # defines its functions; main() runs only as __main__

# What nvcc 13.0 lists (nvcc --list-gpu-arch).
NVCC_13 = [(7, 5), (8, 0), (8, 6), (8, 7), (8, 8), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1)]


@pytest.mark.parametrize("capabilities, expected", [
    ([(9, 0)], "9.0a"),                    # H100/H200: the Hopper path's sm_90a
    ([(9, 0), (9, 0)], "9.0a"),            # one entry per kind of GPU
    ([(8, 0), (8, 6)], "8.0;8.6"),
    ([(8, 9), (9, 0)], "8.9;9.0a"),
    ([(12, 0)], "12.0"),
    ([(13, 0)], "12.1+PTX"),               # newer than nvcc knows: PTX of its newest target
    ([(7, 5)], ""),                        # older than sm_80: the kernels cannot run there
    ([(7, 5), (8, 0)], "8.0"),
])
def test_targets_for_the_visible_gpus(capabilities, expected):
    assert setup_py.arch_list_for(capabilities, NVCC_13) == expected


def fake_gpus(monkeypatch, *capabilities):
    gpus = [types.SimpleNamespace(name=f"GPU {i}", major=c[0], minor=c[1]) for i, c in enumerate(capabilities)]
    monkeypatch.setattr(setup_py.torch.cuda, "is_available", lambda: bool(gpus))
    monkeypatch.setattr(setup_py.torch.cuda, "device_count", lambda: len(gpus))
    monkeypatch.setattr(setup_py.torch.cuda, "get_device_properties", lambda i: gpus[i])
    monkeypatch.setattr(setup_py, "_nvcc_archs", lambda: NVCC_13)


def test_arch_list_setting_wins_then_visible_gpus_then_the_default(monkeypatch, capsys):
    fake_gpus(monkeypatch, (9, 0))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    assert setup_py._arch_list() == "8.0"
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    assert setup_py._arch_list() == "9.0a"
    line = capsys.readouterr().out
    assert "building for the visible GPUs, GPU 0 (9.0): TORCH_CUDA_ARCH_LIST=9.0a" in line
    assert "set TORCH_CUDA_ARCH_LIST to choose others" in line
    fake_gpus(monkeypatch)
    assert setup_py._arch_list() == setup_py.DEFAULT_ARCHS
    assert "no CUDA GPU visible" in capsys.readouterr().out
    fake_gpus(monkeypatch, (7, 0))
    with pytest.raises(SystemExit, match="compute capability 8.0 or newer.*PYGPUKIT_BUILD_CUDA=0"):
        setup_py._arch_list()
