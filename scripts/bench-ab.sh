#!/usr/bin/env bash
# kiln against kiln: `kiln bench attention` under several schedules, each
# variant run once in the order A B .. Z and once in Z .. B A, so that a
# GPU's drift between runs (its clocks follow the last second's power at
# the 700 W limit) falls on every variant alike. One line per shape and run.
#   scripts/bench-ab.sh "COMMON OPTIONS" VARIANT...    ("" is the default)
# e.g. scripts/bench-ab.sh "--backward --head-dim 128 --non-causal --seqs 4096,8192" "" "--persistent 0"
# KILN names the kiln binary (default build/tools/kiln; /tmp/k/bin/kiln
# after scripts/device-run.sh's unpacking); KILN_BENCH_REPS the samples (20).
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
kiln=${KILN:-build/tools/kiln}
common=$1
shift
variants=("$@")
order=()
for ((i = 0; i < ${#variants[@]}; ++i)); do order+=("$i"); done
for ((i = ${#variants[@]} - 1; i >= 0; --i)); do order+=("$i"); done
status=0
for i in "${order[@]}"; do
  v=${variants[$i]}
  # shellcheck disable=SC2086 # the options are words
  out=$("$kiln" bench attention $common $v --reps "${KILN_BENCH_REPS:-20}" 2>&1) || {
    echo "bench-ab: [${v:-default}] failed: $out" >&2
    status=1
    continue
  }
  # The forward's rows have a shapes column before ms; the backward's not.
  awk -F, -v v="[${v:-default}]" '
    /^dtype,/ { for (c = 1; c <= NF; ++c) if ($c == "ms") ms = c; next }
    /^(bf16|fp16),/ && ms { printf "%s N=%s D=%s causal=%s %s ms %s TFLOP/s\n", v, $4, $5, $6, $ms, $(ms + 1) }
  ' <<<"$out"
done
exit $status
