#!/usr/bin/env bash
# Compares the PTX two kiln builds emit for a fixed set of kernels and
# shapes (attention D=64/128 causal and not, aligned and ragged N, bshd,
# sm_80; GEMM; softmax): a codegen change meant to keep static kernels as
# they were shows "identical" for every line.
# usage: scripts/ptx-identity.sh <kiln binary A> <kiln binary B> [extra args]
# (B_ARGS="..." adds arguments for B alone, e.g. --static-shapes 1)
set -uo pipefail
A=$1 B=$2
shift 2
cases=(
  "attention --seq 1024 --head-dim 128"
  "attention --seq 4096 --head-dim 128 --causal"
  "attention --seq 1023 --head-dim 128"
  "attention --seq 4097 --head-dim 128"
  "attention --seq 2049 --head-dim 64"
  "attention --seq 8191 --head-dim 64 --causal"
  "attention --seq 2048 --head-dim 64 --causal"
  "attention --seq 1000 --head-dim 128 --layout bshd"
  "attention --seq 1024 --head-dim 128 --tma-store 0"
  "attention --seq 1024 --head-dim 64 --arch sm_80"
  "gemm --m 512 --n 512 --k 512"
  "gemm --m 4096 --n 4096 --k 4096"
  "softmax --rows 1024 --cols 1024"
  "attention-backward --seq 2048 --head-dim 128"
  "attention-backward --seq 2049 --head-dim 128 --causal"
  "attention-backward --seq 1000 --head-dim 64 --causal"
)
status=0
for c in "${cases[@]}"; do
  a=$(KILN_CACHE_DIR=/nonexistent/a $A ptx $c "$@" 2>&1 | md5sum)
  b=$(KILN_CACHE_DIR=/nonexistent/b $B ptx $c "$@" ${B_ARGS:-} 2>&1 | md5sum)
  if [ "$a" == "$b" ]; then echo "identical  $c"; else echo "DIFFERENT  $c"; status=1; fi
done
exit $status
