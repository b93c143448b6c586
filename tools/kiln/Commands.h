//===- Commands.h - the kiln command line's kernels and runs ----*- C++ -*-===//
#ifndef KILN_TOOLS_KILN_COMMANDS_H
#define KILN_TOOLS_KILN_COMMANDS_H

#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/Kernel.h"
#include "kiln/kernels/AttentionBackward.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/HostTensor.h"

#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kiln::cli {

/// A command line kiln cannot read (an unknown option, a value out of its
/// range): exit status 2. Other kiln::Errors are failures: exit status 1.
class UsageError : public Error {
public:
  using Error::Error;
};

/// Parsed `--name value` options and `--flag`s; each lookup marks the option
/// used so that unknown options are reported.
class Options {
public:
  /// Parses `args` with llvm::cl (Options.cpp): every name in `known` is an
  /// option, a flag (no value; --f, --f=0, or --f 0|1|true|false) when in
  /// `flags`, else takes a value (--name v or --name=v); anything else
  /// starting with -- is refused with llvm::cl's message. Once a process.
  static Options parse(const std::vector<std::string> &args,
                       const std::set<std::string> &flags,
                       const std::set<std::string> &known);
  /// An integer option, checked to lie in [lo, hi] (UsageError otherwise).
  int64_t integer(const std::string &name, int64_t fallback,
                  int64_t lo = std::numeric_limits<int64_t>::min(),
                  int64_t hi = std::numeric_limits<int64_t>::max());
  /// A switch given as an integer option: 0 or 1 (UsageError otherwise).
  bool onOff(const std::string &name, bool fallback) {
    return integer(name, fallback, 0, 1) != 0;
  }
  /// An integer option that must fit an int.
  int int32(const std::string &name, int fallback);
  std::string string(const std::string &name, const std::string &fallback);
  bool flag(const std::string &name);
  /// Throws kiln::Error naming any option that no lookup asked for.
  void checkAllUsed() const;
  std::vector<std::string> positional;

private:
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
};

/// A kernel with inputs, outputs and fp64 references, ready to run.
struct Problem {
  std::optional<Kernel> kernel;
  std::string summary;
  std::map<std::string, HostTensor> tensors;
  /// The tensors `kiln run` passes that do not meet the aligned
  /// specialisation (GpuTarget::unalignedTensors), sorted: what the inspect
  /// commands compile for.
  std::vector<std::string> unaligned;
  /// The run-time integer arguments `kiln run` binds (the kernel's run-time
  /// dimensions): their classes are what the inspect commands compile for.
  std::map<std::string, int64_t> dims;
  /// Output tensor name -> its reference.
  std::vector<std::pair<std::string, HostTensor>> expected;
  /// The kernels `kiln run` launches in order, each binding the tensors it
  /// takes; empty: `kernel` alone (which the inspect commands compile).
  std::vector<Kernel> sequence;
};

/// The benchmarks' --group G (query heads per K/V head, default 1): a
/// UsageError unless it divides the heads of every head dim run (2048 / D,
/// D = --head-dim or 64 and 128), before any GPU work.
int64_t benchGroupOption(Options &opts, const std::string &onlyD);

/// attention-backward: the forward's O and LSE from the fp64 reference,
/// dQ, dK and dV checked; --part delta|dkdv|dq picks the kernel
/// the inspect commands compile (dkdv by default).
Problem attentionBackwardProblem(Options &opts, bool withData);
/// A backward kernel's --part name (attention_bwd_dq_convert: dq_convert).
std::string backwardPartName(const Kernel &k);
/// --batch, --heads, --seq, --seq-k, --head-dim, --causal, --dtype.
kernels::AttentionShape attentionShapeOptions(Options &opts);
/// `batch` seeded lengths uniform in 1..keys (--key-lengths random).
std::vector<int64_t> randomKeyLengths(int64_t batch, int64_t keys,
                                      uint64_t seed);
/// --key-lengths L,L,... (one per batch, each 0 to Nk) or `random` (seeded,
/// 1 to Nk): the keys each batch attends to, a KV cache's filled slots.
/// Sets s.keyLengths where given; the lengths (empty where not).
std::vector<int64_t> keyLengthsOption(Options &opts, kernels::AttentionShape &s,
                                      uint64_t seed);
/// NaN in every K and V slot (B, Hk, Nk, D, in logical order) past a
/// batch's length: a cache's unused slots may hold anything, and a kernel
/// that reads one fails the check.
void poisonPastKeyLengths(const kernels::AttentionShape &s,
                          const std::vector<int64_t> &lengths, HostTensor &k,
                          HostTensor &v);
/// --layout, bhsd (default) or bshd; a UsageError otherwise.
std::string layoutOption(Options &opts);
/// Grouped heads' short non-causal queries as the library runs them: where
/// --grouped-rows (default 1) and kernels::groupedRowsShape take `s`, and
/// its tensors in `layout` are views of that problem's (bhsd, or one query;
/// `lseRowsApart`: LSE's rows Nq apart), `s` becomes that problem (K/V heads
/// as many as its heads) and `layout` bhsd (one query's bshd rows are the
/// same memory). Returns what the summary adds ("" where it does not).
std::string groupedRowsOption(Options &opts, kernels::AttentionShape &s,
                              std::string &layout, bool lseRowsApart = true);
/// The sequence lengths `kiln bench attention` times: `given`, else 512..16k
/// (--quick: 1k, 4k); with --ragged also 1000, 1023, 2049, 3001, 4097, 8191
/// and the multiples of 128 nearest them; sorted.
std::vector<int64_t> benchSequenceLengths(std::vector<int64_t> given,
                                          bool quick, bool ragged);
/// The backward's schedule options (ConfigFlags.cpp: --block-m, --dq-warps,
/// ...), unresolved.
kernels::AttentionBackwardConfig backwardConfigOptions(Options &opts);
/// --against's configs: one per ';'-separated "flag=value ..." part (the
/// same flags), each `base` with those set; "" gives none.
std::vector<kernels::AttentionBackwardConfig>
againstBackwardConfigs(const kernels::AttentionBackwardConfig &base,
                       const std::string &text);
/// The forward's schedule flags (ConfigFlags.cpp: --block-m, --stages,
/// --masked-first, ...): each one given sets its AttentionConfig field in
/// `c`; the others keep c's values.
void forwardConfigFlags(Options &opts, kernels::AttentionConfig &c);
/// --against's configs, as againstBackwardConfigs for the forward's flags.
std::vector<kernels::AttentionConfig>
againstConfigs(const kernels::AttentionConfig &base, const std::string &text);
/// The bench rows' name of config `which` (0: the options' own): "default",
/// then "against", "against2", ... in --against's order.
std::string againstLabel(size_t which);
/// The schedule switches a resolved Config turned on, for a summary line:
/// " producer pingpong overlap min-blocks-per-sm=2 persistent (dynamic
/// tiles) longest-first (groups of 4 heads)" (the ones > 0; a group of 0
/// heads: sized at run time).
std::string scheduleSwitches(int warpSpecialize, int pingpong, int overlap,
                             int minBlocksPerSM, int persistent,
                             int dynamicTiles, int longestFirst,
                             int64_t headGroup);

/// (B,H,N,D) strides: contiguous, or a view of (B,N,H,D) memory.
std::vector<int64_t> attentionStrides(const std::vector<int64_t> &shape,
                                      bool bshd);
/// Notes a tensor `kiln run` passes among the problem's unaligned ones when
/// its strides rule that out.
/// --activation none|relu|gelu (GEMM's epilogue); UsageError otherwise.
kernels::GemmActivation activationOption(Options &opts);
void noteLayout(Problem &p, const std::string &name, DType t,
                const std::vector<int64_t> &strides);
/// Uniform random values in [-1, 1) (empty strides: contiguous).
HostTensor randomTensor(DType t, std::vector<int64_t> shape, uint64_t seed,
                        std::vector<int64_t> strides = {});

/// Builds the named kernel (attention, attention-backward, gemm, softmax) from
/// options; with `withData`, also random inputs, poisoned outputs and
/// references.
Problem makeProblem(const std::string &kernel, Options &opts, bool withData);

/// The one positional argument: a kernel's name.
std::string kernelName(Options &opts);

/// Each host tensor copied into a device buffer of its own (in `buffers`);
/// returns the tensors as device references, by name.
std::map<std::string, TensorRef>
uploadTensors(std::map<std::string, HostTensor> &tensors,
              std::map<std::string, cuda::Buffer> &buffers);

/// The items of a comma-separated list, empty ones kept ("a,,b" has three,
/// "" one), for the caller to refuse.
std::vector<std::string> commaList(const std::string &text);
/// --dtype (or --<option>) as a float type; an integer option that must be
/// >= 1.
DType dtypeOption(Options &opts, const char *fallback,
                  const char *option = "dtype");
int64_t positive(Options &opts, const std::string &name, int64_t fallback,
                 int64_t hi = std::numeric_limits<int64_t>::max());
/// --causal, or --non-causal (the default, said explicitly); both is an error.
bool causalOption(Options &opts);
int positive32(Options &opts, const std::string &name, int fallback);
/// "1000,1001,4097" as integers >= 1; a UsageError naming --option else.
std::vector<int64_t> positiveList(const std::string &text,
                                  const std::string &option);

/// Standard normal bf16 or f16 values (as torch.randn, which the peers'
/// benchmarks use: the input distribution changes tensor-core clocks)
/// straight into device memory, made on the host in chunks (xorshift and
/// Box-Muller: fast enough for billions of elements).
cuda::Buffer randomDevice(DType t, size_t n, uint64_t seed);

/// Milliseconds per call of `calls`, timed as ../shared/bench/peers.py and
/// python3 -m kiln.bench time their peers: 5 untimed calls, then `samples`
/// samples of `batch` back-to-back calls between CUDA events, the median
/// sample divided by `batch`. Back to back for a few hundred milliseconds
/// an H100 reaches its power limit and lowers its clocks (1980 MHz to
/// 1545-1710 at ~690 W); 20 calls timed one by one stayed at 1980 MHz and
/// read ~10% faster than the same kernel in PyTorch
/// (docs/experiments/2026-11-25-h100-session24.txt).
double backToBackMs(const std::function<void()> &calls, int samples, int batch);

/// --arch, --warps, --stages, --reload-ids.
GpuTarget targetOptions(Options &opts);

int cmdIr(Options &opts);
int cmdRun(Options &opts);
int cmdPtx(Options &opts);
int cmdLlvmIr(Options &opts);
int cmdSass(Options &opts);
int cmdResources(Options &opts);
int cmdReport(Options &opts);
int cmdCache(Options &opts);
int cmdBench(Options &opts);
/// `kiln bench attention --backward`.
int benchAttentionBackward(Options &opts);
int cmdBenchJit(Options &opts);
int cmdTune(Options &opts);
int cmdLower(Options &opts);
int cmdCompare(Options &opts);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_COMMANDS_H
