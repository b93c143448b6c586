//===- Driver.cpp - libcuda opened with dlopen, checked -------------------===//
#include "Driver.h"

#include <dlfcn.h>

namespace kiln::cuda::detail {

Driver &driver() {
  // Never destroyed: objects destroyed at exit (caches of loaded kernels,
  // buffers) still reach the driver through it.
  static Driver &d = *new Driver;
  static std::once_flag once;
  std::call_once(once, [] {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      d.error = "the CUDA driver (libcuda.so.1) is not installed";
      return;
    }
#define KILN_LOAD(fn)                                                          \
  d.fn = reinterpret_cast<decltype(d.fn)>(dlsym(h, KILN_STR(fn)));             \
  if (!d.fn) {                                                                 \
    d.error = "libcuda.so.1 lacks " KILN_STR(fn);                              \
    return;                                                                    \
  }
    KILN_DRIVER_FUNCTIONS(KILN_LOAD)
#undef KILN_LOAD
    int count = 0;
    if (CUresult r = d.cuInit(0); r != CUDA_SUCCESS) {
      const char *name = nullptr;
      d.cuGetErrorName(r, &name);
      d.error = std::string("cuInit failed: ") + (name ? name : "?");
      return;
    }
    if (d.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      d.error = "the CUDA driver reports no device";
      return;
    }
    d.count = count;
    d.devices = std::make_unique<Driver::Device[]>(size_t(count));
  });
  return d;
}

std::string resultName(CUresult r) {
  const char *name = nullptr, *text = nullptr;
  Driver &d = driver();
  if (d.cuGetErrorName)
    d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString)
    d.cuGetErrorString(r, &text);
  return std::string(name ? name : "CUDA_ERROR_?") + " (" +
         (text ? text : "no description") + ")";
}

void check(CUresult r, const char *call, const std::string &extra) {
  if (r != CUDA_SUCCESS)
    throw CudaError(std::string(call) + " failed: " + resultName(r) +
                    (extra.empty() ? "" : "\n" + extra));
}

Driver &usable() {
  Driver &d = driver();
  if (!d.error.empty())
    throw CudaError("no usable GPU: " + d.error);
  return d;
}

Driver::Device &deviceState(int ordinal) {
  Driver &d = usable();
  if (ordinal < 0 || ordinal >= d.count)
    throw CudaError("no CUDA device " + std::to_string(ordinal) +
                    ": the driver reports " + std::to_string(d.count));
  Driver::Device &s = d.devices[size_t(ordinal)];
  std::call_once(s.once, [&] {
    KILN_CHECK(cuDeviceGet(&s.dev, ordinal));
    KILN_CHECK(cuDevicePrimaryCtxRetain(&s.ctx, s.dev));
    DeviceInfo &i = s.info;
    i.ordinal = ordinal;
    char name[256] = {};
    KILN_CHECK(cuDeviceGetName(name, sizeof(name), s.dev));
    i.name = name;
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      KILN_CHECK(cuDeviceGetAttribute(&v, a, s.dev));
      return v;
    };
    i.major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    i.minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    i.smCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    i.maxSharedPerBlockOptin =
        attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    KILN_CHECK(cuDriverGetVersion(&i.driverVersion));
    KILN_CHECK(cuDeviceTotalMem(&i.totalMemory, s.dev));
    i.memoryBandwidth = 2.0 * 1e3 *
                        attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) *
                        attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH) / 8;
  });
  return s;
}

int ordinalOf(int ordinal) { return ordinal < 0 ? currentDevice() : ordinal; }

} // namespace kiln::cuda::detail
