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


def run_checks(nproc: int, device: str, timeout: int) -> None:
    """torchrun --standalone (a free port, so that runs side by side do not
    collide) with `nproc` processes; fails with the whole output on a
    non-zero exit."""
    env = dict(os.environ, **NVLINK_MULTICAST_OFF)
    # The scripts import pygpukit_torch from this checkout, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(ROOT / "tests" / "distributed" / "run_checks.py"), "--device", device]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} exited with {proc.returncode}:\n{output}"
    assert "FAIL" not in proc.stdout and "PASS" in proc.stdout, output


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this torch has no torch.distributed")
def test_checks_on_two_cpu_processes_over_gloo():
    run_checks(2, "cpu", timeout=120)


@requires_two_gpus
@pytest.mark.gpu
def test_checks_on_gpus_over_nccl():
    run_checks(min(torch.cuda.device_count(), 4), "cuda", timeout=300)
