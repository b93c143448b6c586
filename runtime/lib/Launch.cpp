//===- Launch.cpp - load compiled PTX and launch it -----------------------===//
#include "kiln/runtime/Launch.h"
#include "kiln/runtime/Error.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

namespace kiln {

static std::atomic<int64_t> fallbackCount{0};

int64_t fallbackLaunches() { return fallbackCount.load(); }

namespace {

/// Tile counters (LaunchSpec::tileCounter) of one device: 32-bit slots of one
/// zeroed allocation, each given to one (kernel, stream) pair for good. A
/// launch leaves its counter at zero, so launches on one stream (ordered)
/// share a slot, and launches on two streams never do.
class TileCounters {
public:
  static constexpr size_t kSlots = 16384;
  explicit TileCounters(int device) : buffer_(kSlots * 4, device) {
    buffer_.fill(0);
  }
  void *take() {
    if (next_ == kSlots)
      throw Error("kiln: all " + std::to_string(kSlots) +
                  " dynamic-tile counters of device " +
                  std::to_string(buffer_.deviceOrdinal()) +
                  " are in use (one per kernel and stream)");
    return static_cast<char *>(buffer_.data()) + 4 * next_++;
  }

private:
  cuda::Buffer buffer_;
  size_t next_ = 0;
};

std::mutex countersMutex;
std::map<int, std::unique_ptr<TileCounters>> countersByDevice;

void *takeCounter(int device) {
  std::lock_guard<std::mutex> lock(countersMutex);
  std::unique_ptr<TileCounters> &c = countersByDevice[device];
  if (!c)
    c = std::make_unique<TileCounters>(device);
  return c->take();
}

} // namespace

struct GpuKernel::Loaded {
  std::unique_ptr<cuda::Module> module;
  cuda::Function fn;
  int64_t resident = 0; ///< CTAs the device runs at once
  bool fromImage = false; ///< loaded from LaunchSpec::images
  /// Dynamic tiles: the counter of each stream this kernel was launched on.
  std::map<cuda::StreamHandle, void *> counters;
};

GpuKernel::GpuKernel(LaunchSpec spec, int device) : spec_(std::move(spec)) {
  for (const TensorParamInfo &t : spec_.tensors)
    fallback_ |= !t.aligned && t.specialisable;
  device_ = device < 0 ? cuda::currentDevice() : device;
  Loaded &l = loadedOn(device_);
  bool constant = true;
  for (const GridExtent &g : spec_.grid)
    constant &= g.isConstant();
  if (constant)
    launchGrid_ = gridFor({}, l.resident);
}

GpuKernel::~GpuKernel() = default;

GpuKernel::Loaded &GpuKernel::loadedOn(int device) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (device >= int(loaded_.size()))
    loaded_.resize(size_t(device) + 1);
  if (loaded_[size_t(device)])
    return *loaded_[size_t(device)];
  const cuda::DeviceInfo &d = cuda::device(device);
  if (spec_.sharedBytes > d.maxSharedPerBlockOptin)
    throw Error("kernel " + spec_.name + " needs " +
                std::to_string(spec_.sharedBytes) +
                " bytes of shared memory; device " + std::to_string(device) +
                " allows " + std::to_string(d.maxSharedPerBlockOptin));
  auto l = std::make_unique<Loaded>();
  const std::string arch =
      "sm_" + std::to_string(d.major) + std::to_string(d.minor);
  if (auto it = spec_.images.find(arch); it != spec_.images.end()) {
    try {
      l->module = std::make_unique<cuda::Module>(
          cuda::Module::fromImage(it->second.bytes, it->second.log, device));
      l->fromImage = true;
    } catch (const cuda::CudaError &) {
      // From another driver, say: the PTX is compiled again below.
    }
  }
  if (!l->module) {
    std::string image;
    l->module = std::make_unique<cuda::Module>(cuda::Module::fromPtx(
        spec_.ptx, device, spec_.onImage ? &image : nullptr));
    if (spec_.onImage)
      spec_.onImage(arch, {image, l->module->infoLog()});
  }
  l->fn = l->module->function(spec_.name);
  if (spec_.sharedBytes > 48 * 1024)
    l->fn.setMaxDynamicShared(int(spec_.sharedBytes));
  l->resident = int64_t(d.smCount) *
                std::max(1, l->fn.maxActiveBlocksPerSM(spec_.threads,
                                                       int(spec_.sharedBytes)));
  loaded_[size_t(device)] = std::move(l);
  return *loaded_[size_t(device)];
}

cuda::FunctionAttributes GpuKernel::attributes() const {
  return loaded_.at(size_t(device_))->fn.attributes();
}

bool GpuKernel::loadedFromImage() const {
  return loaded_.at(size_t(device_))->fromImage;
}

int GpuKernel::blocksPerSM() const {
  return loaded_.at(size_t(device_))
      ->fn.maxActiveBlocksPerSM(spec_.threads, int(spec_.sharedBytes));
}

const std::string &GpuKernel::jitLog() const {
  return loaded_.at(size_t(device_))->module->infoLog();
}

std::array<unsigned, 3>
GpuKernel::launchGridFor(const std::vector<ArgValue> &args) const {
  return gridFor(args, loaded_.at(size_t(device_))->resident);
}

std::array<unsigned, 3> GpuKernel::gridFor(const std::vector<ArgValue> &args,
                                           int64_t resident) const {
  const std::array<int64_t, 3> g =
      evaluateGrid(spec_.grid, spec_.params, args, spec_.name);
  if (spec_.persistent) {
    // As many CTAs as run at once, and no more than there are programs.
    int64_t programs =
        checkedMul(checkedMul(g[0], g[1], spec_.name), g[2], spec_.name);
    if (programs > std::numeric_limits<int32_t>::max())
      throw Error("kernel " + spec_.name + ": " + std::to_string(programs) +
                  " programs exceed the persistent grid's 2^31 - 1");
    return {unsigned(std::min(programs, resident)), 1, 1};
  }
  if (g[0] > std::numeric_limits<int32_t>::max())
    throw Error("kernel " + spec_.name + ": grid x of " + std::to_string(g[0]) +
                " exceeds the device's 2^31 - 1");
  // The compiled kernel folds such a y (foldsGridY): split across y and z.
  if (foldsGridY(spec_.grid) && g[1] > 65535) {
    if (g[1] > std::numeric_limits<int32_t>::max())
      throw Error("kernel " + spec_.name + ": grid y of " +
                  std::to_string(g[1]) + " exceeds 2^31 - 1");
    const int64_t z = (g[1] + 65534) / 65535, y = (g[1] + z - 1) / z;
    return {unsigned(g[0]), unsigned(y), unsigned(z)};
  }
  for (int64_t y : {g[1], g[2]})
    if (y > 65535)
      throw Error("kernel " + spec_.name + ": grid y/z of " +
                  std::to_string(y) + " exceeds the device's 65535");
  return {unsigned(g[0]), unsigned(g[1]), unsigned(g[2])};
}

void GpuKernel::launch(const std::vector<ArgValue> &args,
                       const LaunchOptions &options) {
  if (args.size() != spec_.params.size())
    throw Error("kernel " + spec_.name + " takes " +
                std::to_string(spec_.params.size()) + " arguments, got " +
                std::to_string(args.size()));
  // Parameter storage that outlives the launch call's reading of it (one
  // more slot for a tile counter).
  std::vector<uint64_t> storage(args.size() + 1);
  std::vector<void *> ptrs(args.size());
  // Built only for an error: a launch's cost is its checks.
  auto what = [&](const ParamInfo &p) {
    return "kernel " + spec_.name + ", argument " + p.name;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const ParamInfo &p = spec_.params[i];
    if (p.kind == ParamInfo::Kind::Pointer) {
      auto *v = std::get_if<void *>(&args[i]);
      if (!v)
        throw Error(what(p) + " must be a pointer");
      if (!*v)
        throw Error(what(p) + " is a null pointer");
      storage[i] = reinterpret_cast<uint64_t>(*v);
    } else {
      auto *v = std::get_if<int64_t>(&args[i]);
      if (!v)
        throw Error(what(p) + " must be an integer");
      if (*v % p.multipleOf)
        throw Error(what(p) + " = " + std::to_string(*v) +
                    ": the kernel was built for multiples of " +
                    std::to_string(p.multipleOf));
      if ((p.assumed == ScalarClass::One && *v != 1) ||
          (p.assumed == ScalarClass::DivisibleBy16 && *v % 16))
        throw Error(what(p) + " = " + std::to_string(*v) +
                    ": the kernel was compiled for values of class " +
                    scalarClassName(p.assumed) +
                    " (GpuTarget::scalarClasses, scalarClasses())");
      if (p.dtype == DType::i32) {
        if (*v < std::numeric_limits<int32_t>::min() ||
            *v > std::numeric_limits<int32_t>::max())
          throw Error(what(p) + " = " + std::to_string(*v) +
                      " does not fit the kernel's 32-bit index width");
        int32_t x = int32_t(*v);
        std::memcpy(&storage[i], &x, 4);
      } else {
        storage[i] = uint64_t(*v);
      }
    }
    ptrs[i] = &storage[i];
  }
  for (const TensorParamInfo &t : spec_.tensors)
    if (t.contiguous && !t.strideParams.empty() &&
        std::get<int64_t>(args[t.strideParams.back()]) != 1)
      throw Error(
          "kernel " + spec_.name + ", tensor " + t.name +
          ": the kernel requires a contiguous last dimension "
          "(stride 1), got stride " +
          std::to_string(std::get<int64_t>(args[t.strideParams.back()])));
  for (const TensorParamInfo &t : spec_.tensors)
    if (t.aligned) {
      if (reinterpret_cast<uintptr_t>(std::get<void *>(args[t.pointerParam])) %
          16)
        throw Error("kernel " + spec_.name + ", tensor " + t.name +
                    ": the pointer is not 16-byte aligned; the kernel was "
                    "compiled for aligned rows of it (name it in "
                    "GpuTarget::unalignedTensors)");
      int64_t esize = int64_t(dtypeSize(t.dtype));
      for (size_t d = 0; d < t.strideParams.size(); ++d) {
        int64_t s = std::get<int64_t>(args[t.strideParams[d]]);
        bool last = d + 1 == t.strideParams.size();
        if (last ? s != 1 : (s * esize) % 16 != 0)
          throw Error("kernel " + spec_.name + ", tensor " + t.name +
                      ": stride " + std::to_string(s) + " of dimension " +
                      std::to_string(d) +
                      (last ? " is not 1" : " is not a multiple of 16 bytes") +
                      "; the kernel was compiled for aligned, contiguous rows "
                      "of it (name it in GpuTarget::unalignedTensors)");
      }
    }
  // The device: the options', else the stream's; every pointer must be
  // memory of it (a pointer of another device or of the host would fault
  // in the kernel and leave the context unusable).
  const int device = options.device >= 0 ? options.device
                                         : cuda::deviceOfStream(options.stream);
  if (options.device >= 0 && options.stream &&
      cuda::deviceOfStream(options.stream) != options.device)
    throw Error("kernel " + spec_.name + ": the stream is on device " +
                std::to_string(cuda::deviceOfStream(options.stream)) +
                ", the launch asks for device " + std::to_string(device));
  // The device's context current for the checks, the encoding and the
  // launch; the caller's put back after.
  cuda::ContextScope scope(device);
  for (size_t i = 0; i < args.size() && !options.pointersChecked; ++i) {
    if (spec_.params[i].kind != ParamInfo::Kind::Pointer)
      continue;
    int on = -1;
    try {
      on = cuda::deviceOfPointer(std::get<void *>(args[i]));
    } catch (const cuda::CudaError &) {
    }
    if (on != device)
      throw Error(what(spec_.params[i]) +
                  (on < 0 ? std::string(" is not device memory")
                          : " is memory of device " + std::to_string(on)) +
                  "; the launch runs on device " + std::to_string(device));
  }
  // Tensor maps: 128-byte parameters after the others, built from the
  // pointer and strides they name.
  struct alignas(64) TensorMap {
    unsigned char bytes[128];
  };
  std::vector<TensorMap> maps(spec_.tensorMaps.size());
  for (size_t m = 0; m < maps.size(); ++m) {
    const TensorMapInfo &t = spec_.tensorMaps[m];
    auto what = [&] {
      return "kernel " + spec_.name + ", tensor map of argument " +
             spec_.params.at(t.pointerParam).name;
    };
    size_t rank = t.dims.size();
    std::vector<uint64_t> dims, strideBytes;
    std::vector<uint32_t> box;
    for (size_t i = rank; i-- > 0;) {
      int64_t stride = std::get<int64_t>(args.at(t.strideParams[i]));
      if (i == rank - 1 && stride != 1)
        throw Error(what() + ": the innermost stride is " +
                    std::to_string(stride) + ", TMA needs 1");
      if (i != rank - 1 && (stride <= 0 || (stride * t.elementBytes) % 16 != 0))
        throw Error(what() + ": stride " + std::to_string(stride) +
                    " of dimension " + std::to_string(i) +
                    " is not a positive multiple of 16 bytes");
      int64_t dim = t.dims[i];
      if (!t.dimParams.empty() && t.dimParams[i] >= 0)
        dim = std::get<int64_t>(args.at(t.dimParams[i]));
      if (dim < 1)
        throw Error(what() + ": dimension " + std::to_string(i) + " is " +
                    std::to_string(dim));
      dims.push_back(uint64_t(dim));
      box.push_back(uint32_t(t.box[i]));
      if (i != rank - 1)
        strideBytes.push_back(uint64_t(stride * t.elementBytes));
    }
    cuda::encodeTensorMap(maps[m].bytes,
                          std::get<void *>(args.at(t.pointerParam)),
                          t.elementBytes, dims, strideBytes, box);
    ptrs.push_back(maps[m].bytes);
  }
  Loaded &l = loadedOn(device);
  if (spec_.tileCounter) {
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    void *&counter = l.counters[options.stream];
    if (!counter)
      counter = takeCounter(device);
    storage.back() = reinterpret_cast<uint64_t>(counter);
    ptrs.push_back(&storage.back());
  }
  launchGrid_ = gridFor(args, l.resident);
  l.fn.launch(launchGrid_, {unsigned(spec_.threads), 1, 1},
              unsigned(spec_.sharedBytes), ptrs.data(), options.stream,
              spec_.overlapPrevious);
  if (fallback_)
    ++fallbackCount;
}

} // namespace kiln
