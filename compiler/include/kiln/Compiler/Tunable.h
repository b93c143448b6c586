//===- Tunable.h - kernels `kiln tune <name>` can tune ---------*- C++ -*-===//
//
// A registry of AutotunedKernels by name, each with the sizes of the
// problem it is tuned on: `kiln tune <name> --<size> N ...` builds the
// problem (random inputs), tunes every Config on it, and records the winner
// under the name and key the kernel's own launches look up. kiln's library
// kernels register themselves; a user's kernels register from their own
// shared library (`kiln tune --load libmine.so <name>`) with a static
//
//   kiln::RegisterTunable reg({.name = "my_norm", .sizes = {{"cols", 4096}},
//                              .problem = [](const kiln::TuneSizes &s) {...}});
//
//===----------------------------------------------------------------------===//
#ifndef KILN_COMPILER_TUNABLE_H
#define KILN_COMPILER_TUNABLE_H

#include "kiln/Compiler/Autotuned.h"
#include "kiln/runtime/HostTensor.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

/// Size options by name ("rows" -> 16384).
using TuneSizes = std::map<std::string, int64_t>;

/// What a tuning runs: the kernel, the key its launches use for these
/// sizes, and host tensors (inputs filled, outputs any) by argument name.
struct TuneProblem {
  std::unique_ptr<AutotunedKernel> kernel;
  std::string key;
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, int64_t> scalars;
  double bytes = 0, flops = 0; ///< per launch, for the rate it prints
};

struct TunableKernel {
  std::string name; ///< the command line's name
  std::string help; ///< one line: what it computes
  /// The size options it takes and their defaults, in order.
  std::vector<std::pair<std::string, int64_t>> sizes;
  std::function<TuneProblem(const TuneSizes &)> problem;
};

/// Adds `k` (a later registration of the same name replaces it).
void registerTunable(TunableKernel k);
/// Every registered kernel, by name.
const std::map<std::string, TunableKernel> &tunableKernels();

/// Registers at load time: a static object of a library or program.
struct RegisterTunable {
  explicit RegisterTunable(TunableKernel k) { registerTunable(std::move(k)); }
};

} // namespace kiln

#endif // KILN_COMPILER_TUNABLE_H
