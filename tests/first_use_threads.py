"""Many threads making their first pygpukit calls at the same moment.

Run as a script in a fresh interpreter (nothing warm: no kernel has had its
shared memory raised, no cache is filled), by tests/test_threads.py:

    python tests/first_use_threads.py FAMILY STREAMS [THREADS] [ROUNDS]

FAMILY is "decode" (decode-sized rows against 4096 x 4096 weights, every
layout and precision), "auto" (larger shapes, the dispatcher's choice) or a
name of pygpukit_torch.dispatch.KERNELS, forced for the whole process through
PYGPUKIT_KERNEL. STREAMS is "own" (each thread makes its calls on a stream
of its own, as a server's workers do) or "default" (all on the default
stream). The threads wait on one barrier, then each makes ROUNDS
calls of its own problem. Afterwards every problem runs again alone, and the
script prints one JSON line: the calls made, the errors raised (with their
thread's problem) and the problems whose threaded results are not bitwise
equal to the same call made alone.
"""

import json
import os
import sys
import threading
import traceback

FAMILY = sys.argv[1] if len(sys.argv) > 1 else "decode"
STREAMS = sys.argv[2] if len(sys.argv) > 2 else "own"
THREADS = int(sys.argv[3]) if len(sys.argv) > 3 else 0  # 0: one per problem
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 8
if FAMILY not in ("decode", "auto"):
    os.environ["PYGPUKIT_KERNEL"] = FAMILY  # before the first call: read once

import torch  # noqa: E402

import pygpukit_torch  # noqa: E402


def problems():
    """(name, inputs, call) for each problem of FAMILY; inputs are drawn
    from a generator seeded by the problem's index, on the CPU."""
    out = []
    if FAMILY == "decode":
        rows, n, k = (1, 2, 4, 8, 16, 33), 4096, 4096
    else:
        rows, n, k = (33, 64, 128, 256, 1000, 2048), 1536, 1024
    for m in rows:
        out.append((f"x @ W.T  M={m}", (m, k, n, "kmajor"), lambda x, w, b: pygpukit_torch.matmul_tf32(x, w.t())))
        out.append((f"x @ W    M={m}", (m, k, n, "rowmajor"), lambda x, w, b: pygpukit_torch.matmul_tf32(x, w)))
        out.append((f"linear silu M={m}", (m, k, n, "kmajor"),
                    lambda x, w, b: pygpukit_torch.linear_tf32(x, w, b, "silu")))
        out.append((f"tf32x3 x @ W.T M={m}", (m, k, n, "kmajor"),
                    lambda x, w, b: pygpukit_torch.matmul_tf32(x, w.t(), precision="tf32x3")))
        out.append((f"tf32x3 x @ W M={m}", (m, k, n, "rowmajor"),
                    lambda x, w, b: pygpukit_torch.matmul_tf32(x, w, precision="tf32x3")))
        out.append((f"ieee x @ W.T M={m}", (m, k, n, "kmajor"),
                    lambda x, w, b: pygpukit_torch.matmul_tf32(x, w.t(), precision="ieee")))
    return out


def inputs(index, m, k, n, layout):
    g = torch.Generator().manual_seed(1000 + index)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g) if layout == "kmajor" else torch.randn(k, n, generator=g)
    b = torch.randn(n, generator=g)
    return x.cuda(), w.cuda(), b.cuda()


def main():
    torch.cuda.init()
    specs = problems()
    data = [inputs(i, *spec[1]) for i, spec in enumerate(specs)]
    torch.cuda.synchronize()
    threads_n = THREADS or len(specs)
    barrier = threading.Barrier(threads_n)
    results, errors = {}, []

    def work(t):
        index = t % len(specs)
        name, _, call = specs[index]
        try:
            stream = torch.cuda.Stream() if STREAMS == "own" else torch.cuda.current_stream()
            barrier.wait()
            with torch.cuda.stream(stream):
                outs = [call(*data[index]) for _ in range(ROUNDS)]
            stream.synchronize()
            results[t] = (index, [o.cpu() for o in outs])
        except Exception:  # noqa: BLE001 (reported, not raised, so every thread is seen)
            errors.append({"thread": t, "problem": name, "error": traceback.format_exc(limit=3)})

    threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    torch.cuda.synchronize()
    mismatches = []
    for t, (index, outs) in sorted(results.items()):
        name, _, call = specs[index]
        alone = call(*data[index]).cpu()
        if not all(torch.equal(o, alone) for o in outs):
            mismatches.append({"thread": t, "problem": name,
                               "max_diff": max(float((o - alone).abs().max()) for o in outs)})
    print(json.dumps({"family": FAMILY, "streams": STREAMS, "threads": threads_n, "calls": sum(len(o) for _, o in results.values()),
                      "errors": errors, "mismatches": mismatches}))


if __name__ == "__main__":
    main()
