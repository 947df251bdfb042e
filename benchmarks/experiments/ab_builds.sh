#!/usr/bin/env bash
# Times a base revision of pygpukit against the working tree on forced
# kernels (benchmarks/experiments/ab_forced.py, each against cuBLAS TF32 in its own
# process), the two builds in alternate processes (base, new, base, new,
# ...) so that clock drift and the machine hit both alike.
#
#   benchmarks/experiments/ab_builds.sh prepare REV
#       on the development machine: exports REV into .ab_base (ignored
#       by git; copy it to the GPU machine with the working tree)
#   benchmarks/experiments/ab_builds.sh run ROUNDS [ab_forced.py options, e.g. --case ...]
#       on the GPU machine: builds both (TORCH_CUDA_ARCH_LIST, default
#       9.0a), then ROUNDS alternations; lines sorted by case at the end,
#       also written to $OUT/ab.log when OUT is set.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
base="$root/.ab_base"
case "${1:-}" in
  prepare)
    rm -rf "$base" && mkdir -p "$base"
    git -C "$root" archive "${2:?prepare needs a revision}" | tar -x -C "$base"
    echo "exported ${2} to $base" ;;
  run)
    rounds=${2:?run needs a number of rounds}; shift 2
    export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-8}
    log=${OUT:-/tmp}/ab.log; : > "$log"
    for dir in "$base" "$root"; do
      (cd "$dir" && rm -rf build pygpukit_torch/*.so &&
       python setup.py build_ext --inplace > "${OUT:-/tmp}/build_$(basename "$dir").log" 2>&1) &
    done
    wait
    for r in $(seq "$rounds"); do
      for side in base new; do
        dir=$([ $side = base ] && echo "$base" || echo "$root")
        (cd "$root/benchmarks/experiments" && PYTHONPATH="$dir" python ab_forced.py "$side$r" "$@" 2>&1 |
         { grep -v Warning || true; }) | tee -a "$log"
      done
    done
    echo "--- by case"; sort -k2,4 -s "$log" ;;
  *) echo "usage: $0 prepare REV | run ROUNDS [ab_forced.py options]" >&2; exit 2 ;;
esac
