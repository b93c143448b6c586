//===- Autotune.h - search a kernel's Config space on the GPU ---*- C++ -*-===//
//
// Kernel-independent: a kernel offers candidates (points of its Config space,
// each with a resource estimate and a builder) and a harness (rotating input
// buffers, a check against a reference). The tuner prunes candidates whose
// estimate exceeds the GPU's shared memory or registers, compiles the rest in
// parallel on host threads, times each with CUDA events on rotating inputs,
// checks the winner, and records it in the tuning database. A second run
// finds the record and tunes nothing.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_COMPILER_AUTOTUNE_H
#define KILN_COMPILER_AUTOTUNE_H

#include "kiln/Compiler/Compile.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

/// One point of a kernel's Config space.
struct TuneCandidate {
  std::string config;      ///< "blockM=128 blockN=64 warps=4 stages=2 ..."
  int64_t sharedBytes = 0; ///< estimated from the Config, before compiling
  int registers = 0;       ///< estimated accumulator registers per thread
  std::function<Kernel()> build;
  /// Instead of `build`: kernels launched one after the other, timed and
  /// checked as one (a backward pass of several kernels).
  std::function<std::vector<Kernel>()> buildSequence;
  /// The schedule launches take with no tuned record: compiled and timed
  /// first, whatever the budget, so that no winner is slower than it.
  bool baseline = false;
};

/// How candidates run: argument lists over rotating buffer sets (so that
/// timings do not come from a warm L2), and a check of a kernel's output
/// against an independent reference on fresh inputs ("" when it passes).
struct TuneHarness {
  int sets = 2;
  std::function<std::vector<ArgValue>(const Kernel &, int set)> args;
  std::function<std::string(const Kernel &, GpuKernel &)> check;
  /// For candidates with buildSequence: the check of the loaded kernels.
  std::function<std::string(const std::vector<Kernel> &,
                            const std::vector<GpuKernel *> &)>
      checkSequence;
  /// The tensors `args` binds that are not aligned (unalignedTensors): the
  /// candidates are compiled for them.
  std::vector<std::string> unalignedTensors;
  /// The variant a candidate is compiled and timed in: the one its launches
  /// take for the harness's tensors (variantTarget: alignment and the
  /// classes of the sizes bound from them), the device's arch filled in.
  /// Called from the compile threads. Unset: unalignedTensors only, every
  /// run-time size of the class "any".
  std::function<GpuTarget(const Kernel &)> target;
};

struct TuneOptions {
  /// Compiling and timing stop past this (the harness's inputs, made on
  /// their first use, do not count).
  double budgetSeconds = 30;
  int threads = 0;           ///< compile threads; 0: the host's cores
  int reps = 10;             ///< timed samples per candidate (median)
  int backToBack = 10; ///< launches per sample, back to back (`kiln bench`)
  bool force = false;        ///< tune even when the database has a record
  /// Time every candidate that compiles, also those the estimates prune,
  /// with 3x the launches: the reference for "within 3% of the best".
  bool exhaustive = false;
  std::function<void(const std::string &)> progress; ///< one line per event
  /// Candidates whose compiled kernels spill more than this many bytes of
  /// registers to local memory (per thread) are not timed when some
  /// candidate does not spill; 0: none pruned. AutotunedKernel prunes past
  /// 256: a few spills in an epilogue can be the fastest schedule (the
  /// GEMM's 128x256 blocks with GELU spill 136 B and beat the spill-free
  /// 128x128 by 8-10% on the H200), spills of a whole row are not.
  int pruneSpillBytes = 0;
};

struct TunedTiming {
  std::string config;
  double ms = 0;      ///< median; 0 when not timed
  std::string status; ///< "ok", or why not timed (pruned, compile error...)
  int registers = 0, spillBytes = 0;
  /// Within 5% of the first pass's best and timed again, in turns with the
  /// others so: `ms` is that final round's median, the one the winner was
  /// chosen by (the others' is the first pass's).
  bool finalRound = false;
};

struct TuneResult {
  std::string key;    ///< the database key
  std::string config; ///< the winner
  double ms = 0;
  bool fromDatabase = false;
  double seconds = 0; ///< wall time of the tuning
  std::vector<TunedTiming> timings;
  /// With TuneOptions::exhaustive: the best time over every candidate.
  double exhaustiveBestMs = 0;
  std::string exhaustiveBestConfig;
  /// The database's winner before this run, and its time in this run (0
  /// when it was not timed): with `exhaustive`, how close an ordinary
  /// tuning got to the best.
  std::string previousWinner;
  double previousWinnerMs = 0;
  /// The baseline candidate (TuneCandidate::baseline) and its time in this
  /// run; empty and 0 when there was none.
  std::string baselineConfig;
  double baselineMs = 0;
};

/// Tunes `kernel` for `bucket` and `dtype` on the current GPU. Throws
/// kiln::Error when there is no GPU or when no candidate runs and passes.
TuneResult autotune(const std::string &kernel, const std::string &bucket,
                    const std::string &dtype,
                    std::vector<TuneCandidate> candidates,
                    const TuneHarness &harness, const TuneOptions &options);

/// The database key of a tuning: GPU model, SM count, compute capability,
/// driver, kiln version, kernel, shape bucket and dtype.
std::string tuningKey(const std::string &kernel, const std::string &bucket,
                      const std::string &dtype);

/// The recorded winner's config for that kernel, bucket and dtype on the
/// current GPU, if the database has one (nothing without a GPU).
std::optional<std::string> tunedConfig(const std::string &kernel,
                                       const std::string &bucket,
                                       const std::string &dtype);

/// The database file: KILN_TUNING_DB, else tuning.tsv beside the disk cache
/// ($XDG_CACHE_HOME/kiln or ~/.cache/kiln).
std::string tuningDatabasePath();

} // namespace kiln

#endif // KILN_COMPILER_AUTOTUNE_H
