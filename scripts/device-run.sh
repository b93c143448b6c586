#!/usr/bin/env bash
# What a GPU session runs on the device machine, from the repository root,
# after scripts/pack-for-device.sh here (the device tool's carry: .carry).
# Each argument names one job; its output goes to $OUT/<job>.txt (and .json):
#   tests      every gtest suite (kiln-tests), GPU tests included
#   pytest     the Python package's tests (python/tests)
#   bench      python3 -m kiln.bench, forward (kiln, SDPA flash, SDPA cuDNN)
#   backward   python3 -m kiln.bench --backward
#   norms      examples/bench_vs_torch.py --ops norms at four shapes (kiln's
#              RMSNorm and LayerNorm beside torch's, torch.compile's and a copy)
#   fused      examples/bench_vs_torch.py (kiln's norms, rotary, cross-entropy
#              and linear+GELU beside torch eager, torch.compile, cuBLASLt)
#   gpt        examples/gpt/train.py (needs .carry/corpus.bin.xz, from
#              examples/gpt/make_corpus.py and xz)
#   gptfused   examples/gpt/train.py with every layer through kiln
#              ("kiln_fused": norms, linears, attention, loss) beside kiln's
#              attention alone and SDPA flash, 200 steps (needs the corpus)
#   gptgqa     examples/gpt/train.py with 4 K/V heads for the 12 query
#              heads (grouped-query attention), kiln beside SDPA flash and
#              cuDNN (enable_gqa), 200 steps (needs the corpus)
#   gptstep    examples/gpt/step_bench.py: one training step of the GPT per
#              backend (kiln_fused, kiln, SDPA flash and cuDNN), interleaved,
#              paired against the faster SDPA backend, and the attention
#              alone at its shape
#   jit        kiln bench jit --seqs 1000,4096 (compiles, host time a launch)
#   gemm       kiln bench gemm, plain and with a bias + GELU epilogue, beside
#              cuBLAS and cuBLASLt's fused epilogue (scripts/gemm_peers.py)
#   sanitizer  compute-sanitizer memcheck over the GPU runtime tests, then
#              memcheck, racecheck and synccheck over `kiln run` of the
#              default kernels at ragged shapes and other schedules, and the
#              Python ops (scripts/sanitize-kernels.sh --python)
#   fuzz       random attention problems (shapes, dtypes, layouts, unaligned
#              and strided views), forward and backward into poisoned,
#              guarded outputs, against fp32 (scripts/fuzz-attention.py);
#              then linear, norms, rotary, cross-entropy (scripts/fuzz-ops.py)
# e.g. scripts/device-run.sh tests pytest bench backward
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/out}"
mkdir -p /tmp/k "$OUT"
tar xJf .carry/kiln.tar.xz -C /tmp/k
export LD_LIBRARY_PATH=/tmp/k/lib KILN_LIBRARY=/tmp/k/lib/libkiln_c.so
export KILN_CACHE_DIR=/tmp/kiln-cache KILN_TUNING_DB=/tmp/kiln-tuning-none.tsv
export PYTHONPATH="$PWD/python"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
git_rev=$(cat .carry/commit 2>/dev/null || echo unknown)
for job in "$@"; do
  echo "== $job (commit $git_rev)"
  case "$job" in
  tests) (cd /tmp/k/bin && timeout 400 ./kiln-tests) > "$OUT/tests.txt" 2>&1
    grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/tests.txt" | head -20 ;;
  pytest) timeout 300 python3 -m pytest -q -rs -p no:cacheprovider python/tests \
      > "$OUT/pytest.txt" 2>&1; tail -3 "$OUT/pytest.txt" ;;
  bench) timeout 300 python3 -m kiln.bench --json "$OUT/bench.json" \
      > "$OUT/bench.txt" 2>&1; tail -2 "$OUT/bench.txt" ;;
  backward) timeout 400 python3 -m kiln.bench --backward --json \
      "$OUT/backward.json" > "$OUT/backward.txt" 2>&1; tail -2 "$OUT/backward.txt" ;;
  norms) timeout 300 python3 examples/bench_vs_torch.py --ops norms \
      --norm-shapes 16384x4096,16384x8192,3001x4096,4096x1024 --json "$OUT/norms.json" \
      > "$OUT/norms.txt" 2>&1; cat "$OUT/norms.txt" ;;
  fused) timeout 500 python3 examples/bench_vs_torch.py --json "$OUT/fused.json" \
      > "$OUT/fused.txt" 2>&1; cat "$OUT/fused.txt" ;;
  gpt) xz -dc .carry/corpus.bin.xz > /tmp/corpus.bin
    timeout 400 python3 examples/gpt/train.py --corpus /tmp/corpus.bin \
      --out "$OUT" > "$OUT/gpt.txt" 2>&1; tail -6 "$OUT/gpt.txt" ;;
  gptfused) xz -dc .carry/corpus.bin.xz > /tmp/corpus.bin
    timeout 500 python3 examples/gpt/train.py --corpus /tmp/corpus.bin \
      --backends kiln_fused,kiln,sdpa_flash --steps 200 --out "$OUT/fused" \
      > "$OUT/gptfused.txt" 2>&1; tail -6 "$OUT/gptfused.txt" ;;
  gptgqa) xz -dc .carry/corpus.bin.xz > /tmp/corpus.bin
    timeout 500 python3 examples/gpt/train.py --corpus /tmp/corpus.bin --kv-heads 4 \
      --backends kiln,sdpa_flash,sdpa_cudnn --steps 200 --out "$OUT/gqa" \
      > "$OUT/gptgqa.txt" 2>&1; tail -6 "$OUT/gptgqa.txt" ;;
  gptstep) xz -dc .carry/corpus.bin.xz > /tmp/corpus.bin
    timeout 300 python3 examples/gpt/step_bench.py --corpus /tmp/corpus.bin \
      --backends kiln_fused,kiln,sdpa_flash,sdpa_cudnn \
      > "$OUT/gptstep.txt" 2>&1; tail -11 "$OUT/gptstep.txt" ;;
  jit) timeout 120 /tmp/k/bin/kiln bench jit --seqs 1000,4096 \
      > "$OUT/jit.txt" 2>&1; tail -6 "$OUT/jit.txt" ;;
  gemm) { /tmp/k/bin/kiln bench gemm --sizes 4096,8192
    /tmp/k/bin/kiln bench gemm --sizes 4096,8192 --bias --activation gelu
    python3 scripts/gemm_peers.py --sizes 4096,8192; } > "$OUT/gemm.txt" 2>&1
    grep -vE "^#" "$OUT/gemm.txt" ;;
  # API errors not reported: RefusesPointersTheDeviceCannotRead hands the
  # runtime a host pointer, whose cuPointerGetAttribute fails by design.
  sanitizer) (cd /tmp/k/bin && timeout 400 compute-sanitizer --tool memcheck \
      --report-api-errors no ./kiln-tests --gtest_filter='GpuRuntime*') > "$OUT/sanitizer.txt" 2>&1
    grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitizer.txt" | head
    timeout 560 scripts/sanitize-kernels.sh /tmp/k/bin/kiln --python \
      > "$OUT/sanitize-kernels.txt" 2>&1
    echo "sanitize-kernels exit $?: $(grep -c '| ok$' "$OUT/sanitize-kernels.txt") ok"
    grep -v "| ok$" "$OUT/sanitize-kernels.txt" | head -40 ;;
  fuzz) timeout 300 python3 scripts/fuzz-attention.py --cases 150 --seed "${FUZZ_SEED:-0}" \
      > "$OUT/fuzz.txt" 2>&1
    echo "fuzz exit $?"; grep -E "FAIL|fuzz-attention" "$OUT/fuzz.txt" | head -30
    timeout 300 python3 scripts/fuzz-ops.py --cases 80 --seed "${FUZZ_SEED:-0}" \
      > "$OUT/fuzz-ops.txt" 2>&1
    echo "fuzz-ops exit $?"; grep -E "FAIL|fuzz-ops" "$OUT/fuzz-ops.txt" | head -30 ;;
  *) echo "device-run: unknown job '$job'" >&2; exit 2 ;;
  esac
done
