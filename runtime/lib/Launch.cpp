//===- Launch.cpp - load compiled PTX and launch it -----------------------===//
#include "kiln/runtime/Launch.h"
#include "kiln/runtime/Error.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>

namespace kiln {

static std::atomic<int64_t> fallbackCount{0};

int64_t fallbackLaunches() { return fallbackCount.load(); }

GpuKernel::GpuKernel(LaunchSpec spec) : spec_(std::move(spec)) {
  module_ = std::make_unique<cuda::Module>(cuda::Module::fromPtx(spec_.ptx));
  fn_ = module_->function(spec_.name);
  for (const TensorParamInfo &t : spec_.tensors)
    fallback_ |= !t.aligned && t.specialisable;
  const cuda::DeviceInfo &d = cuda::device();
  if (spec_.sharedBytes > d.maxSharedPerBlockOptin)
    throw Error("kernel " + spec_.name + " needs " +
                std::to_string(spec_.sharedBytes) +
                " bytes of shared memory; the device allows " +
                std::to_string(d.maxSharedPerBlockOptin));
  if (spec_.sharedBytes > 48 * 1024)
    fn_.setMaxDynamicShared(int(spec_.sharedBytes));
  resident_ = int64_t(d.smCount) * std::max(1, blocksPerSM());
  bool constant = true;
  for (const GridExtent &g : spec_.grid)
    constant &= g.isConstant();
  if (constant)
    launchGrid_ = launchGridFor({});
}

std::array<unsigned, 3>
GpuKernel::launchGridFor(const std::vector<ArgValue> &args) const {
  const std::array<int64_t, 3> g =
      evaluateGrid(spec_.grid, spec_.params, args, spec_.name);
  if (spec_.persistent) {
    // As many CTAs as run at once, and no more than there are programs.
    int64_t programs =
        checkedMul(checkedMul(g[0], g[1], spec_.name), g[2], spec_.name);
    if (programs > std::numeric_limits<int32_t>::max())
      throw Error("kernel " + spec_.name + ": " + std::to_string(programs) +
                  " programs exceed the persistent grid's 2^31 - 1");
    return {unsigned(std::min(programs, resident_)), 1, 1};
  }
  if (g[0] > std::numeric_limits<int32_t>::max())
    throw Error("kernel " + spec_.name + ": grid x of " + std::to_string(g[0]) +
                " exceeds the device's 2^31 - 1");
  for (int64_t y : {g[1], g[2]})
    if (y > 65535)
      throw Error("kernel " + spec_.name + ": grid y/z of " +
                  std::to_string(y) + " exceeds the device's 65535");
  return {unsigned(g[0]), unsigned(g[1]), unsigned(g[2])};
}

void GpuKernel::launch(const std::vector<ArgValue> &args) {
  if (args.size() != spec_.params.size())
    throw Error("kernel " + spec_.name + " takes " +
                std::to_string(spec_.params.size()) + " arguments, got " +
                std::to_string(args.size()));
  // Parameter storage that outlives the launch call's reading of it.
  std::vector<uint64_t> storage(args.size());
  std::vector<void *> ptrs(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const ParamInfo &p = spec_.params[i];
    std::string what = "kernel " + spec_.name + ", argument " + p.name;
    if (p.kind == ParamInfo::Kind::Pointer) {
      auto *v = std::get_if<void *>(&args[i]);
      if (!v)
        throw Error(what + " must be a pointer");
      if (!*v)
        throw Error(what + " is a null pointer");
      storage[i] = reinterpret_cast<uint64_t>(*v);
    } else {
      auto *v = std::get_if<int64_t>(&args[i]);
      if (!v)
        throw Error(what + " must be an integer");
      if (*v % p.multipleOf)
        throw Error(what + " = " + std::to_string(*v) +
                    ": the kernel was built for multiples of " +
                    std::to_string(p.multipleOf));
      if ((p.assumed == ScalarClass::One && *v != 1) ||
          (p.assumed == ScalarClass::DivisibleBy16 && *v % 16))
        throw Error(what + " = " + std::to_string(*v) +
                    ": the kernel was compiled for values of class " +
                    scalarClassName(p.assumed) +
                    " (GpuTarget::scalarClasses, scalarClasses())");
      if (p.dtype == DType::i32) {
        if (*v < std::numeric_limits<int32_t>::min() ||
            *v > std::numeric_limits<int32_t>::max())
          throw Error(what + " = " + std::to_string(*v) +
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
  // Tensor maps: 128-byte parameters after the others, built from the
  // pointer and strides they name.
  struct alignas(64) TensorMap {
    unsigned char bytes[128];
  };
  std::vector<TensorMap> maps(spec_.tensorMaps.size());
  for (size_t m = 0; m < maps.size(); ++m) {
    const TensorMapInfo &t = spec_.tensorMaps[m];
    std::string what = "kernel " + spec_.name + ", tensor map of argument " +
                       spec_.params.at(t.pointerParam).name;
    size_t rank = t.dims.size();
    std::vector<uint64_t> dims, strideBytes;
    std::vector<uint32_t> box;
    for (size_t i = rank; i-- > 0;) {
      int64_t stride = std::get<int64_t>(args.at(t.strideParams[i]));
      if (i == rank - 1 && stride != 1)
        throw Error(what + ": the innermost stride is " +
                    std::to_string(stride) + ", TMA needs 1");
      if (i != rank - 1 && (stride <= 0 || (stride * t.elementBytes) % 16 != 0))
        throw Error(what + ": stride " + std::to_string(stride) +
                    " of dimension " + std::to_string(i) +
                    " is not a positive multiple of 16 bytes");
      int64_t dim = t.dims[i];
      if (!t.dimParams.empty() && t.dimParams[i] >= 0)
        dim = std::get<int64_t>(args.at(t.dimParams[i]));
      if (dim < 1)
        throw Error(what + ": dimension " + std::to_string(i) + " is " +
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
  launchGrid_ = launchGridFor(args);
  fn_.launch(launchGrid_, {unsigned(spec_.threads), 1, 1},
             unsigned(spec_.sharedBytes), ptrs);
  if (fallback_)
    ++fallbackCount;
}

} // namespace kiln
