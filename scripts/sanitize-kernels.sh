#!/usr/bin/env bash
# compute-sanitizer's memcheck, racecheck and synccheck over `kiln run` of
# the default kernels at ragged shapes (the GPU's result against fp64 too),
# on a GPU machine: scripts/sanitize-kernels.sh [path/to/kiln] [--python].
# One line per run; exits 1 if any run reports an error or fails its check.
# --python: also scripts/sanitize-python-ops.py (the norms, rotary,
# cross-entropy, linear and attention from PyTorch) under each tool, after
# one run without the sanitizer that tunes and fills the caches. (Session 52's
# run found an out-of-bounds read in the split-keys combine and divergent
# aligned barriers under the dead-row skip; docs/experiments/2026-11-28-session52.txt.)
set -uo pipefail
KILN=kiln PYTHON_OPS=0
for arg in "$@"; do
  case "$arg" in
  --python) PYTHON_OPS=1 ;;
  *) KILN="$arg" ;;
  esac
done
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
  # Grouped-query attention: K/V heads read by 2-4 query heads each.
  "attention --head-dim 128 --seq 1001 --batch 2 --heads 4 --kv-heads 1 --causal"
  "attention --head-dim 64 --seq 1 --seq-k 3001 --batch 2 --heads 8 --kv-heads 2 --non-causal --split-keys 5 --grouped-rows 0"
  # The same as the library runs it: 4 rows of each K/V head (grouped rows).
  "attention --head-dim 64 --seq 1 --seq-k 3001 --batch 2 --heads 8 --kv-heads 2 --non-causal"
  "attention-backward --head-dim 128 --seq 1001 --batch 2 --heads 6 --kv-heads 2 --causal"
  "attention-backward --head-dim 64 --seq 700 --seq-k 1100 --batch 1 --heads 4 --kv-heads 2 --non-causal --convert-dq-last 1"
  # Keys per batch (NaN in every K/V slot past a length): decoding with a
  # length of 0, the ragged end through views that end at a length (D=64),
  # causal chunks at the bottom right (D=128, a length of 0 and one under Nq).
  "attention --head-dim 64 --seq 1 --seq-k 3001 --batch 3 --heads 8 --kv-heads 2 --non-causal --key-lengths 3001,0,1000"
  "attention --head-dim 64 --seq 200 --seq-k 1000 --batch 2 --heads 2 --non-causal --key-lengths 999,130"
  "attention --head-dim 128 --seq 200 --seq-k 1000 --batch 3 --heads 2 --causal --key-lengths 999,130,0"
  "gemm --m 1000 --n 777 --k 300"
  "softmax --rows 300 --cols 3001"
  # Schedules other than the defaults (what the tuner or a user's Config
  # may pick), other dtypes, layouts and strides.
  "attention --head-dim 128 --seq 1001 --batch 2 --heads 3 --causal --dtype fp16 --layout bshd"
  "attention --head-dim 64 --seq 777 --batch 1 --heads 2 --non-causal --lse-stride 781"
  "attention --head-dim 128 --seq 700 --seq-k 1500 --batch 1 --heads 2 --causal --static-shapes 1"
  "attention --head-dim 128 --seq 1500 --seq-k 700 --batch 1 --heads 2 --non-causal --wgmma 0"
  "attention --head-dim 64 --seq 1001 --batch 1 --heads 2 --causal --wgmma 0"
  "attention --head-dim 128 --seq 2049 --batch 1 --heads 2 --non-causal --tma 0"
  "attention --head-dim 128 --seq 2049 --batch 1 --heads 2 --causal --pingpong 0 --overlap 0"
  "attention --head-dim 128 --seq 3001 --batch 1 --heads 2 --non-causal --persistent 1"
  "attention --head-dim 128 --seq 1001 --batch 1 --heads 2 --non-causal --block-m 64"
  "attention --head-dim 64 --seq 2049 --batch 1 --heads 2 --causal --warp-specialize 1"
  "attention --head-dim 128 --seq 1001 --batch 1 --heads 2 --non-causal --skip-dead-rows 1"
  "attention --head-dim 128 --seq 1001 --batch 1 --heads 2 --causal --tma-store 0"
  "attention-backward --head-dim 128 --seq 1001 --batch 1 --heads 2 --non-causal --deterministic 1"
  "attention-backward --head-dim 64 --seq 1001 --batch 1 --heads 2 --causal --separate-dk-dv 1"
  "attention-backward --head-dim 128 --seq 777 --seq-k 1300 --batch 1 --heads 2 --causal --layout bshd --dtype fp16"
  "attention-backward --head-dim 128 --seq 1001 --batch 1 --heads 2 --causal --convert-dq-last 0 --overlap-dq-convert 1"
  "attention-backward --head-dim 64 --seq 1001 --batch 1 --heads 2 --non-causal --scores-by-queries 1"
  "attention-backward --head-dim 64 --seq 1001 --batch 1 --heads 2 --non-causal --kv-in-registers 1 --fold-statistics 1"
  "attention-backward --head-dim 128 --seq 1001 --batch 1 --heads 2 --non-causal --wgmma 0"
  "attention-backward --head-dim 128 --seq 2049 --batch 1 --heads 2 --causal --persistent 1 --dynamic-tiles 1"
  "attention-backward --head-dim 64 --seq 1001 --batch 1 --heads 2 --causal --tma-store 1"
  "gemm --m 1000 --n 777 --k 300 --bias --activation gelu --wgmma 0"
  "gemm --m 2049 --n 1000 --k 513 --persistent 1 --group-m 8"
  "gemm --m 999 --n 1001 --k 77 --tma 0 --static-shapes 1"
  "softmax --rows 3 --cols 100001 --dtype fp16"
  "softmax --rows 1000 --cols 17"
)
failed=0
# sanitize TOOL LABEL COMMAND...: one line, and the first findings on failure.
sanitize() {
  local tool="$1" label="$2" out rc summary verdict
  shift 2
  out=$(timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" 2>&1)
  rc=$?
  summary=$(echo "$out" | grep -oE "(ERROR|RACECHECK) SUMMARY: [^(]*" | head -1)
  [ "$rc" = 0 ] && verdict=ok || { verdict="FAILED (exit $rc)"; failed=1; }
  echo "$tool | $label | $summary | $verdict"
  [ "$rc" = 0 ] || echo "$out" | grep -E "FAIL|Invalid|Race|Barrier|========= [A-Z]" | head -8
}
for tool in memcheck racecheck synccheck; do
  for args in "${RUNS[@]}"; do
    # shellcheck disable=SC2086
    sanitize "$tool" "$args" "$KILN" run $args
  done
done
if [ "$PYTHON_OPS" = 1 ]; then
  script="$(dirname "$0")/sanitize-python-ops.py"
  if ! out=$(timeout 300 python3 "$script" 2>&1); then
    echo "$out" | tail -5
    echo "python ops (no sanitizer) | FAILED"
    failed=1
  fi
  for tool in memcheck racecheck synccheck; do
    sanitize "$tool" "python ops" python3 "$script"
  done
fi
exit "$failed"
