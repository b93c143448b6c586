mkdir -p /tmp/k && tar xJf .carry/kiln.tar.xz -C /tmp/k
export LD_LIBRARY_PATH=/tmp/k/lib; K=/tmp/k/bin/kiln
export KILN_CACHE_DIR=/tmp/kc60 KILN_TUNING_DB=/tmp/t60.tsv
timeout 300 /tmp/k/bin/kiln-tests > $OUT/tests.txt 2>&1; echo "tests rc=$?"; grep -E "PASSED|FAILED|tests ran" $OUT/tests.txt | head
for args in "--head-dim 128 --seq 2048 --batch 1 --heads 1" "--head-dim 128 --seq 1000 --batch 1 --heads 3 --layout bshd" "--head-dim 128 --seq 2048 --batch 1 --heads 1 --causal" "--head-dim 128 --seq 512 --batch 1 --heads 40 --causal" "--head-dim 128 --seq 300 --batch 1 --heads 140" "--head-dim 64 --seq 1000 --batch 1 --heads 3 --causal" "--head-dim 64 --seq 1000 --batch 2 --heads 3"; do
for tool in memcheck racecheck synccheck; do echo "$tool $args: $(timeout 150 compute-sanitizer --tool $tool $K run attention $args 2>&1 | grep -E "SUMMARY|FAIL|persistent:" | tr '\n' ' ')"; done; done > $OUT/sanitizers.txt; cat $OUT/sanitizers.txt
timeout 120 $K tune attention --seq 4096 --head-dim 128 --causal > $OUT/tune-causal.txt 2>&1; tail -1 $OUT/tune-causal.txt
timeout 60 $K tune attention --seq 4096 --head-dim 128 --causal 2>&1 | tail -1
timeout 150 $K tune attention --seq 4096 --head-dim 128 --causal --exhaustive --force > $OUT/tune-exh.txt 2>&1; tail -2 $OUT/tune-exh.txt
timeout 60 $K bench gemm > $OUT/gemm.txt 2>&1; tail -1 $OUT/gemm.txt
KILN_TUNING_DB=/tmp/none.tsv timeout 200 $K bench attention --dtypes bf16,fp16 --json $OUT/kiln.json > $OUT/bench.txt 2>&1
KILN_TUNING_DB=/tmp/none.tsv timeout 250 python3 .carry/peers.py --peers sdpa_flash,sdpa_cudnn --dtypes bf16,fp16 --with-json $OUT/kiln.json > $OUT/peers.txt 2>&1
grep -A40 "# summary" $OUT/peers.txt | head -40
grep -i "ceiling\|gemm" $OUT/peers.txt | head -3
KILN_TUNING_DB=/tmp/none.tsv timeout 150 $K bench attention --dtypes bf16 --tma-store 0 --json $OUT/stglobal.json > $OUT/bench-stglobal.txt 2>&1; echo "ab rc=$?"
KILN_TUNING_DB=/tmp/none.tsv timeout 150 $K bench attention --dtypes bf16 --json $OUT/tmastore.json > $OUT/bench-tmastore.txt 2>&1; echo "ab2 rc=$?"
# (outputs copied from $OUT)
