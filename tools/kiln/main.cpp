//===- main.cpp - the kiln command line -----------------------------------===//
#include "Commands.h"

#include "kiln/runtime/Error.h"

#include <fmt/core.h>

#include <exception>

static const char *kUsage = R"(usage: kiln <command> [options]

commands:
  ir <kernel> [shape options] [--loc]   print the kiln IR built for that shape
  run --cpu <kernel> [shape options]    run on the CPU reference executor and
                                        compare against an fp64 reference;
                                        exits 1 if the relative error > 1e-2
  ptx <kernel> [shape options] [--arch sm_80|sm_90a] [--warps W]
      [--stages S] [--reload-ids 0|1]
      [--stage ptx|llvm|lowered|layouts] print the PTX (or an earlier stage)
  bench attention [--quick] [--dtypes bf16,fp16] [--json FILE] [--reps R]
      [--head-dim D] [--block-m M] [--block-n N] [--warps W] [--stages S]
      [--reload-ids 0|1] [--block-n-diagonal N] [--longest-first-globally 0|1]
                                        TFLOP/s on the GPU over B*N=16k tokens
  help                                  this text

kernels and their shape options:
  attention  --seq N [--seq-k N] --head-dim 64|128 [--causal] [--batch B]
             [--heads H] [--dtype bf16|fp16|fp32] [--layout bhsd|bshd]
             [--block-m M] [--block-n N]
  gemm       --m M --n N --k K [--dtype ...] [--block-m] [--block-n] [--block-k]
  softmax    --rows R --cols C [--dtype ...] [--block-rows] [--block-cols]
  every run takes --seed S for its random inputs and --tolerance T for the
  relative error it accepts (default 1e-2).
)";

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help") {
    fmt::print("{}", kUsage);
    return args.empty() ? 2 : 0;
  }
  std::string cmd = args[0];
  args.erase(args.begin());
  try {
    auto opts =
        kiln::cli::Options::parse(args, {"causal", "cpu", "loc", "quick"});
    if (cmd == "ir")
      return kiln::cli::cmdIr(opts);
    if (cmd == "run")
      return kiln::cli::cmdRun(opts);
    if (cmd == "bench")
      return kiln::cli::cmdBench(opts);
    if (cmd == "ptx")
      return kiln::cli::cmdPtx(opts);
    fmt::print(stderr, "kiln: unknown command '{}'\n\n{}", cmd, kUsage);
    return 2;
  } catch (const kiln::Error &e) {
    fmt::print(stderr, "kiln: error: {}\n", e.what());
    return 2;
  } catch (const std::exception &e) {
    fmt::print(stderr, "kiln: {}\n", e.what());
    return 3;
  }
}
