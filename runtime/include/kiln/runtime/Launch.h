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
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

struct LaunchSpec {
  std::string name, ptx;
  /// Programs along x, y, z: constants, or evaluated from the integer
  /// arguments at each launch. A run-time y beside a constant z of 1 may
  /// pass the device's 65535: the compiler reads such a kernel's program y
  /// as blockIdx.y + gridDim.y * blockIdx.z and returns from those past y,
  /// and the launcher splits y across y and z where it has to.
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
  /// Dynamic tiles: the kernel takes, after the tensor maps, a pointer to a
  /// 32-bit counter of the tiles handed out, zero before the launch and put
  /// back to zero by the launch's last taker. The launcher passes one
  /// counter per device and stream, so that launches of one kernel on two
  /// streams at once each have their own.
  bool tileCounter = false;
  /// The kernel may start before the previous launch on its stream ends
  /// (programmatic dependent launch): it waits itself for what it reads of
  /// that launch's writes, and at its end for that launch to complete.
  bool overlapPrevious = false;
  /// Which variant this is, for the user who launches it: the compiler's
  /// one-line summary (tensors' specialisation, each access's path) and its
  /// lowering report.
  std::string variant;
  std::vector<std::string> report;
  /// Device code the driver compiled from `ptx` before, by the devices'
  /// architecture ("sm_90"), with its compile log: loaded instead of
  /// compiling the PTX again (a new process whose driver cache is cold).
  struct Image {
    std::string bytes, log;
  };
  std::map<std::string, Image> images;
  /// Called with the image of each architecture the runtime compiles the
  /// PTX for (the JIT keeps it in its disk cache); unset: the driver loads
  /// the PTX directly.
  std::function<void(const std::string &arch, const Image &)> onImage;
};

/// Launches in this process of kernels compiled with a tensor left
/// unspecialised (element accesses for it: TensorParamInfo::aligned false),
/// a slower path than the default schedule takes for aligned tensors.
int64_t fallbackLaunches();

/// Where a launch runs: a stream (null: the legacy default stream) and a
/// device ordinal (-1: the stream's device; for the null stream the device
/// of the thread's current context, else 0). The caller's current context is
/// left as it was.
struct LaunchOptions {
  cuda::StreamHandle stream = nullptr;
  int device = -1;
  /// The caller has checked that every pointer argument is memory of the
  /// launch's device (PyTorch tensors on it): no driver query per pointer.
  bool pointersChecked = false;
};

/// A kernel ready to launch with argument values, loaded on each device it
/// is launched on (the first time it is).
class GpuKernel {
public:
  /// Loads the kernel on `device` (-1: cuda::currentDevice()), the device
  /// that attributes(), blocksPerSM() and jitLog() describe.
  explicit GpuKernel(LaunchSpec spec, int device = -1);
  ~GpuKernel();
  /// Checks every argument against its parameter (kind, range of scalars)
  /// and every pointer against the launch's device, then launches on the
  /// options' stream. Does not synchronise. Capturable in a CUDA graph.
  void launch(const std::vector<ArgValue> &args,
              const LaunchOptions &options = {});
  cuda::FunctionAttributes attributes() const;
  /// Blocks per SM at this kernel's threads and dynamic shared memory.
  int blocksPerSM() const;
  const std::string &jitLog() const;
  /// Whether the module came from LaunchSpec::images (no compile of the
  /// PTX in this process).
  bool loadedFromImage() const;
  const LaunchSpec &spec() const { return spec_; }
  /// The grid of the last launch (before any: of one with the grid's
  /// constant extents): spec().grid's programs, or the persistent CTAs.
  std::array<unsigned, 3> launchGrid() const { return launchGrid_; }
  /// The grid these arguments launch: spec().grid evaluated, or as many
  /// persistent CTAs as run at once (on the first device) and no more than
  /// there are programs. Throws kiln::Error when an extent is < 1 or past
  /// the device's limits.
  std::array<unsigned, 3>
  launchGridFor(const std::vector<ArgValue> &args) const;

  struct Loaded; ///< the module, function and occupancy on one device

private:
  std::array<unsigned, 3> gridFor(const std::vector<ArgValue> &args,
                                  int64_t resident) const;
  Loaded &loadedOn(int device);
  LaunchSpec spec_;
  bool fallback_ = false; ///< a tensor compiled without the aligned paths
  int device_ = 0;        ///< the one loaded by the constructor
  std::array<unsigned, 3> launchGrid_{1, 1, 1};
  std::vector<std::unique_ptr<Loaded>> loaded_; ///< by device ordinal
};

} // namespace kiln

#endif // KILN_RUNTIME_LAUNCH_H
