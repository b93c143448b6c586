#!/usr/bin/env bash
# compute-sanitizer's memcheck, racecheck and synccheck over `kiln run` of
# the default kernels at ragged shapes (the GPU's result against fp64 too),
# on a GPU machine: scripts/sanitize-kernels.sh [path/to/kiln]. One line per
# run; exits 1 if any run reports an error or fails its check. (Session 52's
# run found an out-of-bounds read in the split-keys combine and divergent
# aligned barriers under the dead-row skip; docs/experiments/2026-11-28-session52.txt.)
set -uo pipefail
KILN="${1:-kiln}"
RUNS=(
  "attention --head-dim 128 --seq 2049 --batch 1 --heads 2 --non-causal"
  "attention --head-dim 128 --seq 1001 --batch 1 --heads 2 --causal"
  "attention --head-dim 64 --seq 1000 --batch 1 --heads 3 --non-causal"
  "attention --head-dim 64 --seq 2049 --batch 1 --heads 1 --non-causal"
  "attention --head-dim 64 --seq 4097 --batch 1 --heads 1 --causal"
  "attention --head-dim 64 --seq 3001 --batch 1 --heads 2 --causal"
  "attention --head-dim 128 --seq 3 --seq-k 4097 --batch 2 --heads 3 --non-causal --small-tiles 1 --split-keys 3"
  "attention --head-dim 64 --seq 5 --seq-k 3001 --batch 2 --heads 3 --non-causal --split-keys 7"
  "attention --head-dim 64 --seq 1 --seq-k 2049 --batch 16 --heads 16 --non-causal --small-tiles 1"
  "attention --head-dim 128 --seq 1 --seq-k 8191 --batch 1 --heads 4 --non-causal --split-keys 4"
  "attention-backward --head-dim 128 --seq 1001 --batch 1 --heads 2 --causal"
  "attention-backward --head-dim 64 --seq 700 --seq-k 1100 --batch 1 --heads 2 --non-causal"
  "attention-backward --head-dim 64 --seq 2049 --batch 1 --heads 1 --causal"
  "gemm --m 1000 --n 777 --k 300"
  "softmax --rows 300 --cols 3001"
)
failed=0
for tool in memcheck racecheck synccheck; do
  for args in "${RUNS[@]}"; do
    # shellcheck disable=SC2086
    out=$(timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$KILN" run $args 2>&1)
    rc=$?
    summary=$(echo "$out" | grep -oE "(ERROR|RACECHECK) SUMMARY: [^(]*" | head -1)
    [ "$rc" = 0 ] && verdict=ok || { verdict="FAILED (exit $rc)"; failed=1; }
    echo "$tool | $args | $summary | $verdict"
  done
done
exit "$failed"
