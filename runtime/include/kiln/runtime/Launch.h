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
  std::array<int64_t, 3> grid{1, 1, 1};
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
  /// The grid it is launched on: spec().grid, or the persistent CTAs.
  std::array<unsigned, 3> launchGrid() const { return launchGrid_; }

private:
  LaunchSpec spec_;
  bool fallback_ = false; ///< a tensor compiled without the aligned paths
  std::array<unsigned, 3> launchGrid_{1, 1, 1};
  std::unique_ptr<cuda::Module> module_;
  cuda::Function fn_;
};

} // namespace kiln

#endif // KILN_RUNTIME_LAUNCH_H
