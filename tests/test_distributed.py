"""Runs the torch.distributed checks (tests/distributed/run_checks.py: DDP,
FSDP2, tensor parallelism, DTensor sharding rules) under torchrun: always on
2 CPU processes over gloo, and over NCCL on up to 4 GPUs when there are at
least 2."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import requires_two_gpus

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "distributed"))
from harness import NVLINK_MULTICAST_OFF  # noqa: E402


def _has_register_sharding() -> bool:
    """Whether torch has what the DTensor rules need (torch >= 2.5)."""
    try:
        import torch.distributed.tensor.experimental as experimental
    except ImportError:
        return False
    return hasattr(experimental, "register_sharding")


HAS_REGISTER_SHARDING = _has_register_sharding()


def run_checks(nproc: int, device: str, timeout: int) -> None:
    """torchrun --standalone (a free port, so that runs side by side do not
    collide) with `nproc` processes; fails with the whole output on a
    non-zero exit, and on any skipped check where torch has the DTensor
    API the checks need (a skip there would hide a broken rule: an import
    that failed made the TP and rule checks skip, naming torch's version)."""
    env = dict(os.environ, **NVLINK_MULTICAST_OFF)
    # The scripts import pygpukit_torch from this checkout, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(ROOT / "tests" / "distributed" / "run_checks.py"), "--device", device]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} exited with {proc.returncode}:\n{output}"
    assert "FAIL" not in proc.stdout and "PASS" in proc.stdout, output
    if HAS_REGISTER_SHARDING:
        assert "SKIP" not in proc.stdout, output


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this torch has no torch.distributed")
def test_checks_on_two_cpu_processes_over_gloo():
    run_checks(2, "cpu", timeout=120)


@requires_two_gpus
@pytest.mark.gpu
def test_checks_on_gpus_over_nccl():
    # 2 or 4 ranks: the tensor-parallel model's widths split evenly over
    # those (over 3 its checks skip, which run_checks fails).
    run_checks(4 if torch.cuda.device_count() >= 4 else 2, "cuda", timeout=300)
