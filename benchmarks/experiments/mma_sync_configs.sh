#!/bin/bash
# Times mma.sync tile configurations of the working tree or of other revisions
# (mma_sync_configs.cu, one build per configuration, built in parallel).
#   here:            benchmarks/experiments/mma_sync_configs.sh prepare REV...  (extracts REV's kernel headers)
#   GPU machine:     benchmarks/experiments/mma_sync_configs.sh run "SRC BM BN BK WM WN STAGES [MINB INSIDE [small|MxNxK,...]]" ...
# SRC: "tree" (the working tree), a prepared REV, or either with suffix 80
# ("tree80"): compute_80 PTX, as an sm_80 build's code runs on a newer GPU.
set -e
cd "$(dirname "$0")"
root=../..
if [ "$1" = prepare ]; then
  shift
  for rev in "$@"; do
    mkdir -p .revs/$rev
    for f in cuda/mma_sync/mma_sync_gemm.cuh cuda/mma_sync/mma_sync_config.h cuda/common/ptx.cuh cuda/common/epilogue.cuh; do
      mkdir -p .revs/$rev/$(dirname $f)
      git -C $root show $rev:csrc/$f > .revs/$rev/$f
    done
  done
  exit 0
fi
[ "$1" = run ] && shift
cfgs=("$@")
tmp=$(mktemp -d)
i=0
for c in "${cfgs[@]}"; do
  set -- $c
  src=${1%80}; inc="-I$root/csrc"; [ "$src" != tree ] && inc="-I.revs/$src $inc"
  arch="-arch=sm_90a"; [ "$src" != "$1" ] && arch="-gencode arch=compute_80,code=compute_80"
  nvcc -O3 -std=c++17 $arch --expt-relaxed-constexpr -Xptxas=-v $inc -DCBM=$2 -DCBN=$3 -DCBK=$4 -DCWM=$5 \
    -DCWN=$6 -DCSTAGES=$7 ${8:+-DMINB=$8} ${9:+-DINSIDE=$9} mma_sync_configs.cu -o $tmp/m$i -lcublas > $tmp/m$i.log 2>&1 &
  i=$((i+1))
done
wait
j=0
for c in "${cfgs[@]}"; do
  set -- $c
  echo "# $c: $(grep -A3 'entry.*mma_sync' $tmp/m$j.log | grep -E 'spill|Used' | tr '\n' ' ' | sed 's/ptxas info    ://g')"
  if [ -x $tmp/m$j ]; then $tmp/m$j ${10} || true; else tail -5 $tmp/m$j.log; fi
  j=$((j+1))
done
