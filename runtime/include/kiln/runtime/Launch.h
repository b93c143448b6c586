//===- Launch.h - load compiled PTX and launch it ---------------*- C++ -*-===//
//
// The runtime's side of the compiler->runtime contract: PTX plus the launch
// metadata, no MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_LAUNCH_H
#define KILN_RUNTIME_LAUNCH_H

#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Params.h"

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

struct LaunchSpec {
  std::string name, ptx;
  /// Programs along x, y, z: constants, or evaluated from the integer
  /// arguments at each launch.
  GridExtents grid{1, 1, 1};
  int threads = 128;
  int64_t sharedBytes = 0;
  std::vector<ParamInfo> params;
  /// Each launch checks the tensors compiled as aligned against that.
  std::vector<TensorParamInfo> tensors;
  /// TMA tensor maps passed after `params`, encoded at each launch.
  std::vector<TensorMapInfo> tensorMaps;
  /// The kernel loops over `grid`'s programs (x fastest) in rounds of
  /// gridDim.x, one per CTA each round: it is launched on a 1-D grid of at
  /// most as many CTAs as the device runs at once.
  bool persistent = false;
  /// Which variant this is, for the user who launches it: the compiler's
  /// one-line summary (tensors' specialisation, each access's path) and its
  /// lowering report.
  std::string variant;
  std::vector<std::string> report;
};

/// Launches in this process of kernels compiled with a tensor left
/// unspecialised (element accesses for it: TensorParamInfo::aligned false),
/// a slower path than the default schedule takes for aligned tensors.
int64_t fallbackLaunches();

/// A kernel loaded on the device, ready to launch with argument values.
class GpuKernel {
public:
  explicit GpuKernel(LaunchSpec spec);
  /// Checks every argument against its parameter (kind, range of scalars),
  /// then launches on the default stream. Does not synchronise.
  void launch(const std::vector<ArgValue> &args);
  cuda::FunctionAttributes attributes() const { return fn_.attributes(); }
  /// Blocks per SM at this kernel's threads and dynamic shared memory.
  int blocksPerSM() const {
    return fn_.maxActiveBlocksPerSM(spec_.threads, int(spec_.sharedBytes));
  }
  const std::string &jitLog() const { return module_->infoLog(); }
  const LaunchSpec &spec() const { return spec_; }
  /// The grid of the last launch (before any: of one with the grid's
  /// constant extents): spec().grid's programs, or the persistent CTAs.
  std::array<unsigned, 3> launchGrid() const { return launchGrid_; }
  /// The grid these arguments launch: spec().grid evaluated, or as many
  /// persistent CTAs as run at once and no more than there are programs.
  /// Throws kiln::Error when an extent is < 1 or past the device's limits.
  std::array<unsigned, 3>
  launchGridFor(const std::vector<ArgValue> &args) const;

private:
  LaunchSpec spec_;
  bool fallback_ = false; ///< a tensor compiled without the aligned paths
  int64_t resident_ = 0;  ///< CTAs the device runs at once
  std::array<unsigned, 3> launchGrid_{1, 1, 1};
  std::unique_ptr<cuda::Module> module_;
  cuda::Function fn_;
};

} // namespace kiln

#endif // KILN_RUNTIME_LAUNCH_H
