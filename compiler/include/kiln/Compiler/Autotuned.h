//===- Autotuned.h - any kernel, a list of Configs, tuned on use -*- C++
//-*-===//
//
// triton.autotune's idea for kiln kernels: a kernel function of a Config,
// a list of Configs and a key. The first launch for a key times every
// Config on the caller's own tensors (autotune: pruned by what compiles,
// compiled in parallel, CUDA events), checks the fastest against the first
// Config's outputs, and records it in the tuning database; later launches,
// and later processes on the same GPU, take the record and tune nothing.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_COMPILER_AUTOTUNED_H
#define KILN_COMPILER_AUTOTUNED_H

#include "kiln/Compiler/Autotune.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

class AutotunedKernel {
public:
  struct Options {
    /// The tensors the kernel writes: compared, for the winner, with what
    /// the first Config writes (relative L2 error within `tolerance`). The
    /// kernel must write them whole on every launch (no accumulation into
    /// them): tuning launches it many times.
    std::vector<std::string> outputs;
    double tolerance = 1e-3;
    TuneOptions tune{.pruneSpillBytes = 256};
  };

  /// `configs` names each Config ("rows=4 warps=8"); build(i) is the
  /// kernel for configs[i]. `name` keys the tuning database.
  AutotunedKernel(std::string name, std::vector<std::string> configs,
                  std::function<Kernel(size_t)> build, Options options);

  /// Launches the Config chosen for `key` (the caller's bucket of the
  /// problem, e.g. "cols=4096 bf16"), tuning it first when neither this
  /// object nor the database has one. Throws kiln::Error without a GPU.
  void launch(const std::string &key,
              const std::map<std::string, TensorRef> &tensors,
              const std::map<std::string, int64_t> &scalars = {},
              const LaunchOptions &launch = {});

  /// How the next tunings run (`kiln tune` forces one, with its budget).
  void setTuneOptions(const TuneOptions &tune) {
    const int prune = options_.tune.pruneSpillBytes;
    options_.tune = tune;
    options_.tune.pruneSpillBytes = prune;
  }

  /// The Config chosen for `key`, if one is (after a launch).
  std::optional<std::string> chosen(const std::string &key) const;
  /// How the last launch got its Config: "tuned", "database" or "memo".
  const std::string &lastSource() const { return lastSource_; }
  /// The last tuning's result (timings of every Config).
  const std::optional<TuneResult> &lastTuning() const { return lastTuning_; }

private:
  const Kernel &kernel(size_t i);
  size_t tune(const std::string &key,
              const std::map<std::string, TensorRef> &tensors,
              const std::map<std::string, int64_t> &scalars);

  std::string name_;
  std::vector<std::string> configs_;
  std::function<Kernel(size_t)> build_;
  Options options_;
  std::map<size_t, Kernel> kernels_;
  std::map<std::string, size_t> chosen_;
  /// Per key: the loaded variant of the chosen kernel and what decided it
  /// (the tensors' alignment, the values' classes), so that a launch like
  /// the last skips the JIT cache's lookup (the kernel's IR hashed).
  struct Loaded {
    std::string variant;
    std::shared_ptr<GpuKernel> kernel;
    /// What decided the variant at the last launch (each tensor's base
    /// alignment, sizes and strides; the scalars): a launch with the same
    /// skips working the variant out again.
    std::vector<int64_t> signature;
  };
  std::map<std::string, Loaded> loaded_;
  std::string lastSource_;
  std::optional<TuneResult> lastTuning_;
};

} // namespace kiln

#endif // KILN_COMPILER_AUTOTUNED_H
