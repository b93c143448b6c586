//===- CudaModule.cpp - modules from PTX or images, their functions -------===//
#include "Driver.h"

namespace kiln::cuda {

using namespace detail;

Module Module::fromPtx(const std::string &ptx, int ordinal,
                       std::string *image) {
  ordinal = ordinalOf(ordinal);
  ContextScope scope(ordinal);
  Driver &d = driver();
  std::string info(1 << 14, '\0'), err(1 << 14, '\0');
  CUjit_option opts[] = {
      CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_LOG_VERBOSE};
  void *vals[] = {info.data(), reinterpret_cast<void *>(info.size()),
                  err.data(), reinterpret_cast<void *>(err.size()),
                  reinterpret_cast<void *>(1)};
  // The driver writes NUL-terminated logs into the buffers.
  auto logs = [&] {
    info.resize(std::min(info.size(), info.find('\0')));
    err.resize(std::min(err.size(), err.find('\0')));
    return "JIT error log:\n" + err + "\nJIT info log:\n" + info;
  };
  CUmodule m = nullptr;
  if (!image) {
    CUresult r = d.cuModuleLoadDataEx(&m, ptx.c_str(), 5, opts, vals);
    check(r, "cuModuleLoadDataEx", logs());
  } else {
    // The driver's compile through its linker, which hands back the image
    // (SASS) for the caller to keep.
    CUlinkState link = nullptr;
    check(d.cuLinkCreate(5, opts, vals, &link), "cuLinkCreate", "");
    CUresult r =
        d.cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char *>(ptx.c_str()),
                        ptx.size() + 1, "kiln.ptx", 0, nullptr, nullptr);
    void *bytes = nullptr;
    size_t size = 0;
    if (r == CUDA_SUCCESS)
      r = d.cuLinkComplete(link, &bytes, &size);
    if (r == CUDA_SUCCESS)
      image->assign(static_cast<const char *>(bytes), size);
    d.cuLinkDestroy(link);
    check(r, "cuLinkComplete", logs());
    return fromImage(*image, info, ordinal);
  }
  return Module(m, info, ordinal);
}

Module Module::fromImage(const std::string &image, const std::string &log,
                         int ordinal) {
  ordinal = ordinalOf(ordinal);
  ContextScope scope(ordinal);
  Driver &d = driver();
  CUmodule m = nullptr;
  check(d.cuModuleLoadDataEx(&m, image.data(), 0, nullptr, nullptr),
        "cuModuleLoadDataEx (image)", "");
  return Module(m, log, ordinal);
}

Module::~Module() {
  if (module_)
    releaseOn(device_, [&](Driver &d) {
      d.cuModuleUnload(static_cast<CUmodule>(module_));
    });
}

Module::Module(Module &&o) noexcept
    : module_(o.module_), infoLog_(std::move(o.infoLog_)), device_(o.device_) {
  o.module_ = nullptr;
}

Function Module::function(const std::string &name) const {
  ContextScope scope(device_);
  Driver &d = driver();
  CUfunction f = nullptr;
  KILN_CHECK(
      cuModuleGetFunction(&f, static_cast<CUmodule>(module_), name.c_str()),
      "kernel name: " + name);
  Function fn;
  fn.fn_ = f;
  fn.name_ = name;
  fn.device_ = device_;
  return fn;
}

FunctionAttributes Function::attributes() const {
  ContextScope scope(device_);
  Driver &d = driver();
  auto f = static_cast<CUfunction>(fn_);
  FunctionAttributes a;
  KILN_CHECK(cuFuncGetAttribute(&a.registers, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
  KILN_CHECK(cuFuncGetAttribute(&a.staticSharedBytes,
                                CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
  KILN_CHECK(
      cuFuncGetAttribute(&a.localBytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f));
  KILN_CHECK(cuFuncGetAttribute(&a.maxThreadsPerBlock,
                                CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
  return a;
}

int Function::maxActiveBlocksPerSM(int threads, int dynamicSharedBytes) const {
  ContextScope scope(device_);
  Driver &d = driver();
  int blocks = 0;
  KILN_CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(
                 &blocks, static_cast<CUfunction>(fn_), threads,
                 size_t(dynamicSharedBytes)),
             "kernel " + name_);
  return blocks;
}

void Function::setMaxDynamicShared(int bytes) {
  ContextScope scope(device_);
  Driver &d = driver();
  KILN_CHECK(cuFuncSetAttribute(static_cast<CUfunction>(fn_),
                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                bytes),
             "kernel " + name_ + ", " + std::to_string(bytes) + " bytes");
}

void Function::launch(std::array<unsigned, 3> grid,
                      std::array<unsigned, 3> block, unsigned sharedBytes,
                      void **args, StreamHandle stream, bool overlapPrevious) {
  ContextScope scope(device_);
  Driver &d = driver();
  // One call for both: no attribute is an ordinary launch.
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = grid[0];
  config.gridDimY = grid[1];
  config.gridDimZ = grid[2];
  config.blockDimX = block[0];
  config.blockDimY = block[1];
  config.blockDimZ = block[2];
  config.sharedMemBytes = sharedBytes;
  config.hStream = static_cast<CUstream>(stream);
  config.attrs = &attr;
  config.numAttrs = overlapPrevious ? 1 : 0;
  CUresult r =
      d.cuLaunchKernelEx(&config, static_cast<CUfunction>(fn_), args, nullptr);
  if (r != CUDA_SUCCESS)
    check(r, "cuLaunchKernelEx", "kernel " + name_);
}

} // namespace kiln::cuda
