"""Where a decode kernel's time goes: a fixed cost per call against the rate
at which it streams the weight. x[M, K] @ W[N, K]^T (F.linear's layout) at
M = 16, N = 4096, K from 1024 to 32768: device time per call of the skinny
kernel (forced), the dispatcher's choice and cuBLAS TF32, each as a CUDA
graph of 60 calls over weights rotated past L2 (launch gaps included, host
time not, as a decode step replayed from a graph runs), median of 9
replays timed with CUDA events (_common.device_time_ms: the graph's
launch latency stays out); and a device copy of a W-sized buffer, the
bandwidth reference. Then a least-squares fit t = t0 + bytes(W) / rate per
variant: t0 is what does not scale with the weight (launch gap, fill,
drain, reduction), rate the weight's streaming rate. A variant whose
kernel changes with K (the dispatcher's choice, cuBLAS) fits less well:
the table gives each fit's worst relative error.

    python benchmarks/experiments/bench_decode_fit.py [--m 16] [--n 4096]
"""

import argparse

import _path  # noqa: F401  (the repository root on sys.path: benchmarks._common)

import numpy as np
import torch

import pygpukit_torch
from pygpukit_torch.dispatch import force_kernel
from pygpukit_torch.testing import cublas_tf32

from benchmarks._common import device_time_ms, header_line, markdown_table, rotation_count, run_header

KS = (1024, 2048, 4096, 8192, 16384, 32768)


def graph_time_us(fn, sets, calls=60, replays=9) -> float:
    """Device time per call: `calls` calls of fn over `sets`, captured in one
    CUDA graph, median over `replays` replays."""
    for s in sets[:3]:
        fn(*s)
    torch.cuda.synchronize()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn(*sets[0])  # workspace allocated outside the capture
        with torch.cuda.graph(graph, stream=stream):
            for i in range(calls):
                fn(*sets[i % len(sets)])
    graph.replay()
    torch.cuda.synchronize()
    return float(np.median([device_time_ms(graph.replay) * 1e3 / calls for _ in range(replays)]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m", type=int, default=16, help="rows of x")
    parser.add_argument("--n", type=int, default=4096, help="rows of W (output features)")
    args = parser.parse_args()
    print(header_line(run_header()))
    linear = lambda x, w: pygpukit_torch.matmul_tf32(x, w.t())
    rows, fits = [], {"skinny": [], "auto": [], "cuBLAS": []}
    for k in KS:
        w_bytes = 4 * args.n * k
        sets = [(torch.randn(args.m, k, device="cuda"), torch.randn(args.n, k, device="cuda"))
                for _ in range(max(2, rotation_count(w_bytes)))]
        with force_kernel("skinny"):
            skinny = graph_time_us(linear, sets)
        auto = graph_time_us(linear, sets)
        with cublas_tf32(True):
            cublas = graph_time_us(lambda x, w: torch.matmul(x, w.t()), sets)
        copy = graph_time_us(lambda dst, src: dst.copy_(src), [(torch.empty_like(w), w) for _, w in sets])
        for name, t in (("skinny", skinny), ("auto", auto), ("cuBLAS", cublas)):
            fits[name].append((w_bytes, t))
        x, w = sets[0]
        rows.append([args.m, args.n, k, f"{w_bytes / 1e6:.1f}", f"{skinny:.2f}", f"{auto:.2f}", f"{cublas:.2f}",
                     f"{copy:.2f}", f"{w_bytes / skinny / 1e6:.2f}", f"{w_bytes / auto / 1e6:.2f}",
                     f"{w_bytes / cublas / 1e6:.2f}", f"{2 * w_bytes / copy / 1e6:.2f}",
                     pygpukit_torch.kernel_info(x, w.t())])
        del sets
    print("\n".join(markdown_table(
        ["M", "N", "K", "W MB", "skinny us", "auto us", "cuBLAS us", "copy us", "skinny TB/s", "auto TB/s",
         "cuBLAS TB/s", "copy TB/s (read + write)", "kernel (auto)"], rows)))
    fit_rows = []
    for name, points in fits.items():
        nbytes, t = np.array(points, dtype=float).T
        (t0, per_byte), *_ = np.linalg.lstsq(np.stack([np.ones_like(nbytes), nbytes], 1), t, rcond=None)
        worst = np.max(np.abs(t0 + per_byte * nbytes - t) / t)
        fit_rows.append([name, f"{t0:.2f}", f"{1 / per_byte / 1e6:.2f}", f"{worst:.1%}"])
    print()
    print("\n".join(markdown_table(["variant", "t0 (us)", "rate (TB/s)", "worst fit error"],
                                   fit_rows)))


if __name__ == "__main__":
    main()
