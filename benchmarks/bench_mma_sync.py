"""mma_sync: the portable TF32 kernel (mma.sync, what sm_80 to sm_89 GPUs run)
forced on this GPU, against cuBLAS TF32 and, given CUTLASS's headers, against
CUTLASS 2.x's sm80 TF32 kernels, in one run.

Ours and cuBLAS are timed as in `matmul` (torch.utils.benchmark, turns,
inputs rotated past the L2 cache). CUTLASS (`--cutlass DIR`, a folder holding
CUTLASS's include/ and tools/util/include/) is built here with nvcc in six
tile configurations (benchmarks/peers/cutlass_sm80_tf32.cu, for this GPU's
architecture: the sm80 kernels' instructions) and each runs in its own
process after ours: median of 30 CUDA-event-timed calls after 5 warm-up
calls, taking turns over input sets whose A and B exceed three times the L2
cache, as ours do. The table shows the best configuration per shape.

    python -m benchmarks mma_sync [--quick] [--cutlass DIR] [--jobs N]
        [--min-run-time SECONDS] [--markdown OUT.md] [--save [FILE]]
"""

import concurrent.futures
import json
import os
import pathlib
import subprocess
import tempfile

import torch

import pygpukit_torch
from pygpukit_torch.testing import cublas_tf32, rel_error

from ._common import add_common_arguments, pick_device, publish, rotation_count, run_header, time_interleaved
from .bench_matmul import make_inputs

# (M, N, K) x layouts: "nn" is a @ b with b row-major, "nt" F.linear's x @ W.T.
SIZES = ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 14336, 4096), (8192, 4096, 14336), (8192, 4096, 4096))
SHAPES = [(m, n, k, layout) for m, n, k in SIZES for layout in ("nn", "nt")]
QUICK = [(m, n, k, layout) for m, n, k in SIZES[:2] for layout in ("nn", "nt")]
CPU_QUICK = [(64, 64, 64, "nn"), (33, 65, 47, "nt")]
# CUTLASS tile configurations: threadblock BM BN BK, warp WM WN WK, stages.
CUTLASS_CONFIGS = ((128, 128, 32, 64, 64, 32, 3), (128, 256, 32, 64, 64, 32, 3), (256, 128, 32, 64, 64, 32, 3),
                   (128, 128, 16, 64, 64, 16, 4), (256, 128, 16, 64, 64, 16, 4), (128, 256, 16, 64, 64, 16, 4))
PEER_SOURCE = pathlib.Path(__file__).resolve().parent / "peers" / "cutlass_sm80_tf32.cu"
OURS, CUBLAS, CUTLASS = "pygpukit mma_sync", "cuBLAS tf32", "CUTLASS sm80"


def add_arguments(parser):
    parser.add_argument("--quick", action="store_true", help="4096³ and 8192³ only")
    parser.add_argument("--cutlass", metavar="DIR", default=os.environ.get("CUTLASS_DIR"),
                        help="a folder holding CUTLASS's include/ and tools/util/include/: also time CUTLASS "
                             "2.x's sm80 TF32 kernels (default: $CUTLASS_DIR)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="parallel nvcc builds of the peers")
    add_common_arguments(parser, min_run_time=1.0)


def command(args) -> str:
    """The command line that identifies this run's section in a results file."""
    return "mma_sync" + (" --quick" if args.quick else "") + (" --cutlass" if args.cutlass else "")


def build_peers(cutlass_dir, jobs):
    """Builds the CUTLASS peer once per configuration for this GPU; returns
    [(config, executable)] and a list of build failures."""
    from torch.utils.cpp_extension import CUDA_HOME
    root = pathlib.Path(cutlass_dir)
    if not (root / "include" / "cutlass" / "gemm" / "device" / "gemm.h").exists():
        raise SystemExit(f"--cutlass {cutlass_dir}: no include/cutlass/gemm/device/gemm.h there")
    nvcc = pathlib.Path(CUDA_HOME or "/usr/local/cuda") / "bin" / "nvcc"
    major, minor = torch.cuda.get_device_capability()
    out = pathlib.Path(tempfile.mkdtemp(prefix="cutlass_peer_"))

    def build(config):
        exe = out / ("peer_" + "_".join(map(str, config)))
        defines = [f"-D{name}={value}" for name, value in zip(("BM", "BN", "BK", "WM", "WN", "WK", "STAGES"), config)]
        done = subprocess.run([str(nvcc), "-O3", "-std=c++17", f"-arch=sm_{major}{minor}", f"-I{root / 'include'}",
                               f"-I{root / 'tools' / 'util' / 'include'}", *defines, str(PEER_SOURCE), "-o", str(exe)],
                              capture_output=True, text=True)
        return config, exe, done

    built, failed = [], []
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        for config, exe, done in pool.map(build, CUTLASS_CONFIGS):
            if done.returncode == 0:
                built.append((config, exe))
            else:
                failed.append(f"{config}: {done.stderr.strip().splitlines()[-1:] or done.returncode}")
    return built, failed


def time_peers(peers, shapes):
    """{(M, N, K, layout): (best TFLOP/s, its configuration)} over the peers."""
    spec = ",".join(f"{m}x{n}x{k}:{layout}" for m, n, k, layout in shapes)
    best = {}
    for config, exe in peers:
        done = subprocess.run([str(exe), spec], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"CUTLASS {config} failed: {done.stderr.strip()}")
            continue
        for line in done.stdout.splitlines():
            r = json.loads(line)
            if r["ms"] is None:
                continue
            key = (r["M"], r["N"], r["K"], r["layout"])
            tflops = 2 * r["M"] * r["N"] * r["K"] / (r["ms"] * 1e-3) / 1e12
            if tflops > best.get(key, (0, None))[0]:
                best[key] = (tflops, r["config"])
    return best


def run(args) -> int:
    device = pick_device(args)
    if args.cutlass and device != "cuda":
        raise SystemExit("--cutlass needs a CUDA GPU")
    header = run_header(device)
    peers = []
    if args.cutlass:
        peers, failed = build_peers(args.cutlass, args.jobs)
        for failure in failed:
            print(f"CUTLASS build failed: {failure}")
    variants = {OURS: (pygpukit_torch.matmul_tf32, lambda: pygpukit_torch.force_kernel("mma_sync")),
                CUBLAS: (torch.matmul, lambda: cublas_tf32(True))}
    shapes = (CPU_QUICK if device == "cpu" else QUICK if args.quick else SHAPES)
    rows = []
    for i, (m, n, k, layout) in enumerate(shapes):
        sets = make_inputs(m, n, k, layout, rotation_count(4 * (m * k + k * n), device), device)
        a0, b0 = sets[0]
        ref = torch.matmul(a0.double(), b0.double())
        sub = f"{m}x{n}x{k} {layout}"
        measured = time_interleaved(variants, sets, "mma_sync TFLOP/s", sub, len(variants) * args.min_run_time)
        row = {"M": m, "N": n, "K": k, "layout": layout, "tflops": {}, "rel_err": {}}
        for name, (fn, context) in variants.items():
            with context():
                row["rel_err"][name] = rel_error(fn(a0, b0), ref)
            row["tflops"][name] = 2 * m * n * k / measured[name].median / 1e12
        rows.append(row)
        print(f"[{i + 1}/{len(shapes)}] {sub:22s} mma_sync {row['tflops'][OURS]:6.1f} TFLOP/s "
              f"(err {row['rel_err'][OURS]:.2e})  cuBLAS TF32 {row['tflops'][CUBLAS]:6.1f}", flush=True)
        del sets, ref
    if peers:
        best = time_peers(peers, shapes)
        for row in rows:
            key = (row["M"], row["N"], row["K"], row["layout"])
            if key in best:
                row["tflops"][CUTLASS], row["cutlass_config"] = best[key]
    section = {"benchmark": "mma_sync", "command": command(args), "header": header, "rows": rows}
    publish(args, section)
    return 0
