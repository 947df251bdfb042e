"""accuracy: the FP32-accurate precisions (tf32x3, fp32, ieee) against cuBLAS FP32
on inputs that are hard for floating-point products, errors only.

Each case is one product of fresh random inputs; errors are against the
float64 product of the same inputs: norm-wise ‖out − ref‖ / ‖ref‖ and the
worst element |out − ref| / (|A|·|B|) (componentwise, relative to the
magnitudes summed). Entries whose reference is NaN or ±Inf are left out of
both and checked to be NaN / the same Inf instead. cuBLAS FP32 is
torch.matmul with TF32 off. "fp32" is the precision as dispatched (its
small products run plain FP32); "fp32 ozaki" forces its Ozaki method where
the GPU has it.

    python -m benchmarks accuracy [--quick] [--markdown OUT.md] [--save [FILE]]

Without a GPU, --quick runs smaller sizes on the CPU, torch.matmul in float32
standing in for cuBLAS FP32 and the ops' CPU emulation for ours.
"""

import torch

import pygpukit_torch
from pygpukit_torch.testing import cublas_tf32, matmul_errors

from ._common import add_common_arguments, pick_device, publish, run_header

PRECISIONS = ("tf32x3", "fp32", "ieee")
CUBLAS = "cuBLAS fp32"


def cases(device, quick):
    """[(name, a, b)]: the accuracy suite, fresh inputs from a fixed seed."""
    g = torch.Generator(device=device).manual_seed(0)
    rows = 64 if quick else 256
    k_big = 16384 if quick else 65536
    k_huge = 1 << (14 if quick else 20)

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=g)

    def binades(shape, lo, hi):
        return torch.exp2(torch.randint(lo, hi + 1, shape, device=device, generator=g).float())

    out = [(f"normal, K = {k}", randn(rows, k), randn(k, rows)) for k in (1, 64, 4096, k_big)]
    k = 4096
    out.append(("magnitudes 2^-20 .. 2^20 within rows and columns",
                randn(rows, k) * binades((rows, k), -20, 20), randn(k, rows) * binades((k, rows), -20, 20)))
    a = randn(rows, k)
    a[:, 7] = 2.0 ** 40
    out.append(("one element 2^40 in every row of A", a, randn(k, rows)))
    a, b = randn(rows, k), randn(k, rows)
    a[:, 7], b[9, :] = 2.0 ** 20, 2.0 ** 20
    out.append(("one element 2^20 in every row of A and column of B, at different k", a, b))
    x, y = randn(rows, k // 2), randn(k // 2, rows)
    out.append(("cancellation (B's halves nearly opposite)", torch.cat([x, x], 1),
                torch.cat([y, -y + 1e-3 * randn(k // 2, rows)], 0)))
    out.append(("subnormal A (|a| ~ 1e-39)", randn(rows, k) * 1e-39, randn(k, rows)))
    out.append(("tiny A times big B (1e-30, 1e20)", randn(rows, k) * 1e-30, randn(k, rows) * 1e20))
    a = randn(rows, k)
    a[3, 5], a[9, 1] = float("nan"), float("inf")
    out.append(("a NaN and an Inf in A", a, randn(k, rows)))
    out.append((f"K = {k_huge}, 16 x 16 output", randn(16, k_huge), randn(k_huge, 16)))
    return out


def add_arguments(parser):
    parser.add_argument("--quick", action="store_true", help="smaller sizes (the CPU run)")
    add_common_arguments(parser)


def command(args) -> str:
    """The command line that identifies this run's section in a results file."""
    return "accuracy" + (" --quick" if args.quick else "")


def run(args) -> int:
    device = pick_device(args)
    header = run_header(device)
    rows = []
    for name, a, b in cases(device, args.quick):
        with cublas_tf32(False):
            results = {CUBLAS: matmul_errors(torch.matmul(a, b), a, b)}
        kernels = {}
        for precision in PRECISIONS:
            out = pygpukit_torch.matmul_tf32(a, b, precision=precision)
            results[f"pygpukit {precision}"] = matmul_errors(out, a, b)
            kernels[precision] = pygpukit_torch.kernel_info(a, b, precision=precision)
        with pygpukit_torch.force_kernel("ozaki"):
            info = pygpukit_torch.kernel_info(a, b, precision="fp32")
            if info.startswith("ozaki"):
                results["pygpukit fp32 ozaki"] = matmul_errors(pygpukit_torch.matmul_tf32(a, b, precision="fp32"), a, b)
                kernels["fp32 ozaki"] = info
        rows.append({"case": name, "M": a.shape[0], "N": b.shape[1], "K": a.shape[1],
                     "norm": {v: r[0] for v, r in results.items()}, "worst": {v: r[1] for v, r in results.items()},
                     "nonfinite_ok": {v: r[2] for v, r in results.items()}, "kernels": kernels})
        print(f"{name:50s} " + "  ".join(f"{v} {r[0]:.2e}/{r[1]:.2e}" for v, r in results.items()), flush=True)
    section = {"benchmark": "accuracy", "command": command(args), "header": header, "rows": rows}
    publish(args, section)
    return 0
