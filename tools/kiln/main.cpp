//===- main.cpp - the kiln command line -----------------------------------===//
#include "Commands.h"

#include "kiln/Compiler/DiskCache.h"

#include "kiln/runtime/Error.h"

#include <fmt/core.h>

#include <exception>
#include <regex>
#include <set>

static const char *kUsage = R"(usage: kiln <command> [options]

commands:
  ir <kernel> [shape options] [--loc]   print the kiln IR built for that shape
  ir <kernel> [shape options] --stage list|<stage> [target options]
                                        list every compiler stage with its
                                        compile time, or print one (a pass
                                        name such as kiln-assign-layouts or
                                        cse.2, its number, llvm-ir, llvm-opt,
                                        ptx)
  llvm-ir <kernel> [shape options] [--unoptimized] [target options]
  ptx <kernel> [shape options] [target options]
  sass <kernel> [shape options] [target options]
                                        SASS through ptxas and cuobjdump or
                                        nvdisasm, when installed
  report <kernel> [shape options] [target options]
                                        the lowering report: the path each
                                        dot (wgmma or mma.sync, and why) and
                                        each load (cp.async and its depth, or
                                        registers) took, warp roles, then
                                        what resources prints
  resources <kernel> [shape options] [target options]
                                        registers, spills, shared memory,
                                        occupancy, compile time per stage
  cache ls | info <key> [--stage S] | clear
                                        the disk cache (KILN_CACHE_DIR, else
                                        ~/.cache/kiln; KILN_CACHE_MAX_MB)
  run --cpu <kernel> [shape options]    run on the CPU reference executor and
                                        compare against an fp64 reference;
                                        exits 1 if the relative error > 1e-2
  bench attention [--quick] [--ragged] [--seqs N,N,...] [--dtypes bf16,fp16]
      [--json FILE] [--reps R] [--batch K] [--tokens T] [--seq-k M] [--group G]
      [--causal | --non-causal] [--head-dim D] [--block-m M] [--block-n N] [--warps W] [--stages S]
      [--reload-ids 0|1] [--block-n-diagonal N] [--block-n-ragged-end N]
      [--ragged-end-in-loop 0|1] [--masked-first 0|1]
      [--align-rows-to-end 0|1]
      [--narrow-in-diagonal 0|1]
      [--longest-first-globally 0|1]
      [--head-group G] [--dynamic-tiles 0|1]
      [--copy-per-register 0|1] [--llvm-pipeline kiln|O1|O2|O3] [--wgmma 0|1] [--tma 0|1] [--tma-store 0|1] [--skip-dead-rows 0|1] [--one-shot-loads 0|1] [--warp-specialize 0|1]
      [--pingpong 0|1] [--overlap 0|1] [--peel-first 0|1] [--persistent 0|1]
      [--min-blocks-per-sm B] [--split-keys S] [--small-tiles 0|1]
      [--static-shapes 0|1 | --shapes default|static|runtime|both]
      [--against "flag=V ..."] [--key-lengths random]
                                        TFLOP/s on the GPU over B*N=16k tokens
                                        (--tokens T: B = T / N;
                                        --seq-k M: M keys, N queries),
                                        timed as peers.py times its peers
                                        (--group G: G query heads per K/V
                                        head, grouped-query attention;
                                        --key-lengths random: non-causal,
                                        each batch attends to a seeded
                                        random 1..M keys, TFLOP/s of them)
                                        (median of R samples, default 30, of
                                        K back-to-back launches, default 10)
                                        (--shapes both: each row compiled
                                        with B, H, N in and with them
                                        run-time, back to back; --against:
                                        each row also under the config with
                                        those of the flags above set, the
                                        samples in turn; "A; B": under each,
                                        rows +against, +against2, ...;
                                        --ragged: also N=1000, 1023, 2049,
                                        3001, 4097, 8191 and the multiples of
                                        128 nearest them)
  bench attention --backward [--quick] [--ragged] [--seqs N,N,...]
      [--dtypes bf16,fp16] [--head-dim D] [--causal | --non-causal]
      [--json FILE] [--reps R] [--batch K] [--tokens T] [--group G]
      [backward config options] [--against "flag=V ..."]
                                        the backward's three kernels timed
                                        together (TFLOP/s as 2.5x the
                                        forward's FLOPs; --against: also
                                        under the config with those of its
                                        options set, samples in turn; "A; B":
                                        under each), each one's time
  bench gemm [--size N | --sizes N,N,... | --mnk MxNxK,...]
      [--shapes static|runtime|both]
      [--block-m M] [--block-n N] [--block-k K]
      [--warps W] [--stages S] [--wgmma 0|1] [--tma 0|1] [--warp-specialize 0|1]
      [--tma-store 0|1] [--persistent 0|1] [--group-m G] [--bias]
      [--activation none|relu|gelu] [--min-blocks-per-sm B] [--b-transposed]
      [--a-transposed] [--split-k S]  (S > 1: fp32 C, no epilogue)
      [--reps R] [--batch K]
                                        TFLOP/s of the DSL GEMM, bf16, N^3
                                        (or M x N x K)
  tune attention|attention-backward --seq N --head-dim D [--causal | --non-causal]
      [--seq-k M] [--dtype bf16|fp16]  (--seq-k: M keys; at most 16
                                        queries on more keys tune as
                                        decoding, small mma.sync tiles too)
      [--batch B] [--heads H] [--budget S] [--threads T] [--force]
      [--exhaustive] [--reps R]         autotune on the GPU: every candidate's
      [--back-to-back K]                time (median of R samples of K back-
                                        to-back launches) and the winner,
                                        recorded for this
                                        GPU (KILN_TUNING_DB); the JIT then
                                        uses it; a second run tunes nothing
                                        (the backward: every kernel timed as
                                        one, dQ's own kernel or atomics)
  tune <kernel> [--load LIB.so] [--sizes a=N,b=M] [--<size> N]
      [--budget S] [--threads T]        a kernel of the registry (rmsnorm,
                                        layernorm, rotary, cross-entropy,
                                        cross-entropy-backward, linear, or a
                                        user's, registered by the library
                                        --load opens): every Config timed on
                                        random inputs of those sizes (e.g.
                                        --cols C --rows R; a norm's
                                        --autocast 1: fp32 x and weights,
                                        bf16 y, as under bf16 autocast),
                                        the winner recorded under the name
                                        and key its launches use
                                        (kiln.rms_norm ...)
  tune --list [--load LIB.so]           the tunable kernels and their sizes
  bench jit [--seq N] [--head-dim D] [--causal | --non-causal] [--reps R] [--json]
                                        compile latency without a GPU: cold
                                        DSL -> PTX, and a disk-cache hit
  bench jit --seqs N,N,... [--head-dim D] [--causal | --non-causal] [--cache-dir DIR]
      [--json]                          the first call of each length in one
                                        process: build, compile or cache hit,
                                        module load, first launch (on a GPU),
                                        and the compiles they took
  lower attention --mode unfused|elementwise|fused [--seq N] [--head-dim D]
      [--causal | --non-causal] [--batch B] [--heads H] [--dtype] [--json] [--graph] [--ir]
                                        without a GPU: the kernels of that
                                        lowering of the attention graph, the
                                        bytes each reads and writes, peak
                                        memory and the fusion passes' log
  compare attention [--min-seq N] [--max-seq N] [--head-dims 64,128]
      [--batch B] [--heads H] [--dtype]
      [--reps R] [--out DIR]            on the GPU: the three lowerings for
                                        N = 256.. (until out of memory or
                                        --max-seq), D 64 and 128, causal and
                                        not: time, TFLOP/s, peak memory,
                                        launches, bytes; compare.json in DIR
                                        (scripts/plot_compare.py plots it)
  help, -h, --help                      this text
  --version                             the compiler's build (what cache
                                        entries are keyed on)

target options: --arch sm_80|sm_90a (default sm_90a) --warps W --stages S
  --reload-ids 0|1 --llvm-pipeline kiln|O1|O2|O3 (LLVM's middle end; kiln's
  short pipeline by default) --unaligned T,T (compile as for those tensors
  not 16-byte aligned: a view at an odd offset, padded rows).
  KILN_DUMP_DIR=<dir> writes every stage of every compile.

kernels and their shape options:
  attention  --seq N [--seq-k N] --head-dim 64|128 [--causal | --non-causal] [--batch B]
             [--heads H] [--kv-heads K] (K/V heads, a divisor of H: grouped-query
             attention, H/K query heads per K/V head)
             [--grouped-rows 0|1] (non-causal, K < H, N < 128: run as the
             library does, the K-head problem of H/K*N rows a head; default 1)
             [--key-lengths L,L,..|random] (batch b attends to its first
             L keys, a KV cache's filled slots; causal, its queries the
             last of them; B lengths 0..N, or random ones 1..N)
             [--dtype bf16|fp16|fp32] [--layout bhsd|bshd]
             [--lse-stride S] (LSE's row stride; default N: rows that are
             not 16-byte aligned take element stores, and say so)
             [--block-m M] [--block-n N] [--wgmma 0|1] [--tma 0|1] [--tma-store 0|1]
             [--skip-dead-rows 0|1] [--one-shot-loads 0|1] [--warp-specialize 0|1]
             [--pingpong 0|1] [--overlap 0|1] [--peel-first 0|1] [--persistent 0|1]
             [--static-shapes 0|1] (B, H, N compiled in; default run-time)
             [--split-keys S [--part split|combine]] (non-causal: the keys in
             S ranges, then a kernel that combines them; --part: the one
             the inspect commands compile, split by default; without it the
             library's default for --sms N SMs, the GPU's where there is
             one, else no split)
             [--small-tiles 0|1] (decoding's mma.sync tiles: 16 rows on
             one warp, three stages; default: few queries, keys not split,
             where their programs fill the --sms SMs and where
             --memory-gbps G, the GPU's DRAM GB/s (its own where there is
             one, else 0), reaches 30 an SM)
  attention-backward  the attention options above but --lse-stride and
             the forward's schedule; [--part P] (the kernel the inspect
             commands compile, one of the schedule's: delta, dkdv and
             dq_convert by default, dq with --deterministic 1, dk and dv
             with --separate-dk-dv 1; run launches them all)
             [--block-m M] [--block-n N] (dK/dV: N keys per program, M
             queries per step) [--dq-block-m M] [--dq-block-n N] [--warps W]
             [--stages S] [--wgmma 0|1] [--tma 0|1] [--warp-specialize 0|1]
             [--pingpong 0|1] [--overlap 0|1] [--min-blocks-per-sm B]
             [--dq-warps W] [--separate-dk-dv 0|1] [--static-shapes 0|1]
             [--deterministic 0|1] (dQ by its own kernel, or atomics)
             [--reload-ids 0|1] (thread ids re-read in each loop body)
             [--persistent 0|1] [--dynamic-tiles 0|1] (dK/dV on persistent CTAs)
             [--longest-first-globally 0|1] [--head-group G] (causal dK/dV:
             the key blocks that see the most queries first, per G heads)
             [--kv-in-registers 0|1] (dK/dV: K and V in registers for the
             loop's first two dots) [--scores-by-queries 0|1] (dK/dV: S = Q·Kᵀ,
             P and dS staged, rather than Sᵀ = K·Qᵀ) [--fold-statistics 0|1]
             (Sᵀ: LSE and Delta added by its dots) [--tma-store 0|1] (dK/dV
             written by TMA from a staging tile) [--convert-dq-last 0|1]
             (dQ converted by each head's last dK/dV program, or a kernel)
             [--overlap-dq-convert 0|1] (dq_convert starts before dK/dV ends,
             each head once its programs have arrived)
  gemm       --m M --n N --k K [--dtype ...] [--out-dtype fp32|bf16|fp16]
             [--block-m] [--block-n] [--block-k]
             [--wgmma 0|1] [--tma 0|1] [--warp-specialize 0|1] [--tma-store 0|1]
             [--persistent 0|1] [--group-m G] [--static-shapes 0|1]
             [--min-blocks-per-sm B] (CTAs an SM must hold at once)
             [--bias] [--activation none|relu|gelu]   C = act(A·B + bias)
             [--b-transposed]  B given as BT (N x K), nn.Linear's weight
             [--a-transposed]  A given as AT (K x M), as X in X^T·dY
             [--pre-activation]  also Z = A·B + bias (the activation's input)
             [--split-k S]  K in S ranges added into C by atomics (fp32 C)
             [--split-partials]  each range's product into C (S x M x N)
                                 apart, as kiln.linear's weight gradients
  softmax    --rows R --cols C [--dtype ...] [--block-rows] [--block-cols]
             [--static-shapes 0|1]
  every run takes --seed S for its random inputs and --tolerance T for the
  relative error it accepts (default 1e-2).
)";

/// Every option the usage text names: the options the command line takes.
static std::set<std::string> documentedOptions() {
  std::set<std::string> names;
  static const std::regex option("--([a-z][a-z0-9-]*)");
  const std::string usage = kUsage;
  for (auto it = std::sregex_iterator(usage.begin(), usage.end(), option);
       it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  names.erase("help");
  names.erase("version");
  return names;
}

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" ||
      args[0] == "-h") {
    fmt::print("{}", kUsage);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    fmt::print("kiln (compiler build {})\n", kiln::compilerBuildId());
    return 0;
  }
  for (const std::string &a : args)
    if (a == "--help" || a == "-h") { // kiln <command> --help
      fmt::print("{}", kUsage);
      return 0;
    }
  std::string cmd = args[0];
  args.erase(args.begin());
  try {
    std::set<std::string> flags{
        "causal",        "cpu",          "loc",
        "quick",         "ragged",       "unoptimized",
        "force",         "exhaustive",   "backward",
        "non-causal",    "bias",         "list",
        "b-transposed",  "a-transposed", "pre-activation",
        "split-partials"};
    bool benchJit = cmd == "bench" && !args.empty() && args[0] == "jit";
    if (cmd == "lower") {
      flags.insert("json");
      flags.insert("graph");
      flags.insert("ir");
    }
    if (benchJit)
      flags.insert("json"); // bench attention's --json takes a file
    auto opts = kiln::cli::Options::parse(args, flags, documentedOptions());
    if (benchJit) {
      opts.positional.erase(opts.positional.begin());
      return kiln::cli::cmdBenchJit(opts);
    }
    if (cmd == "ir")
      return kiln::cli::cmdIr(opts);
    if (cmd == "run")
      return kiln::cli::cmdRun(opts);
    if (cmd == "bench")
      return kiln::cli::cmdBench(opts);
    if (cmd == "ptx")
      return kiln::cli::cmdPtx(opts);
    if (cmd == "llvm-ir")
      return kiln::cli::cmdLlvmIr(opts);
    if (cmd == "sass")
      return kiln::cli::cmdSass(opts);
    if (cmd == "resources")
      return kiln::cli::cmdResources(opts);
    if (cmd == "report")
      return kiln::cli::cmdReport(opts);
    if (cmd == "cache")
      return kiln::cli::cmdCache(opts);
    if (cmd == "tune")
      return kiln::cli::cmdTune(opts);
    if (cmd == "lower")
      return kiln::cli::cmdLower(opts);
    if (cmd == "compare")
      return kiln::cli::cmdCompare(opts);
    fmt::print(stderr, "kiln: error: unknown command '{}'\n\n{}", cmd, kUsage);
    return 2;
  } catch (const kiln::cli::UsageError &e) {
    fmt::print(stderr, "kiln: error: {}\n", e.what());
    return 2;
  } catch (const kiln::Error &e) {
    fmt::print(stderr, "kiln: error: {}\n", e.what());
    return 1;
  } catch (const std::exception &e) { // kiln::InternalError, bad_alloc, ...
    fmt::print(stderr, "kiln: error: {}\n", e.what());
    return 1;
  }
}
