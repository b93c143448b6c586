//===- CudaMemory.cpp - device buffers, copies, TMA descriptors -----------===//
#include "Driver.h"

namespace kiln::cuda {

using namespace detail;

Buffer::Buffer(size_t bytes, int ordinal)
    : bytes_(bytes), device_(ordinalOf(ordinal)) {
  ContextScope scope(device_);
  Driver &d = driver();
  if (bytes == 0)
    return;
  CUdeviceptr p = 0;
  CUresult r = d.cuMemAlloc(&p, bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    throw OutOfMemory("cuMemAlloc: out of device memory: asked for " +
                      std::to_string(bytes) + " bytes");
  check(r, "cuMemAlloc", "asked for " + std::to_string(bytes) + " bytes");
  ptr_ = p;
}

Buffer::~Buffer() {
  if (ptr_)
    releaseOn(device_, [&](Driver &d) { d.cuMemFree(CUdeviceptr(ptr_)); });
}

Buffer::Buffer(Buffer &&o) noexcept
    : ptr_(o.ptr_), bytes_(o.bytes_), device_(o.device_) {
  o.ptr_ = 0;
  o.bytes_ = 0;
}

Buffer &Buffer::operator=(Buffer &&o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  std::swap(device_, o.device_);
  return *this;
}

static void checkRange(size_t offset, size_t bytes, size_t size,
                       const char *op) {
  if (offset > size || bytes > size - offset)
    throw Error(std::string("Buffer::") + op + ": " + std::to_string(bytes) +
                " bytes at offset " + std::to_string(offset) +
                " overrun a buffer of " + std::to_string(size));
}

void Buffer::upload(const void *host, size_t bytes, size_t offset) {
  checkRange(offset, bytes, bytes_, "upload");
  ContextScope scope(device_);
  Driver &d = driver();
  if (bytes)
    KILN_CHECK(cuMemcpyHtoD(CUdeviceptr(ptr_ + offset), host, bytes));
}

void Buffer::download(void *host, size_t bytes, size_t offset) const {
  checkRange(offset, bytes, bytes_, "download");
  ContextScope scope(device_);
  Driver &d = driver();
  if (bytes)
    KILN_CHECK(cuMemcpyDtoH(host, CUdeviceptr(ptr_ + offset), bytes));
}

void Buffer::fill(uint8_t byte) {
  ContextScope scope(device_);
  Driver &d = driver();
  if (bytes_)
    KILN_CHECK(cuMemsetD8(CUdeviceptr(ptr_), byte, bytes_));
}

void copyToHost(void *host, const void *device, size_t bytes) {
  ContextScope scope(deviceOfPointer(device));
  Driver &d = driver();
  if (bytes)
    KILN_CHECK(cuMemcpyDtoH(
        host, CUdeviceptr(reinterpret_cast<uintptr_t>(device)), bytes));
}

void copyDeviceToDevice(void *dst, const void *src, size_t bytes) {
  ContextScope scope(deviceOfPointer(src));
  Driver &d = driver();
  if (bytes)
    KILN_CHECK(cuMemcpyDtoDAsync(CUdeviceptr(reinterpret_cast<uintptr_t>(dst)),
                                 CUdeviceptr(reinterpret_cast<uintptr_t>(src)),
                                 bytes, nullptr));
}

MemoryInfo memoryInfo() {
  ContextScope scope(currentDevice());
  Driver &d = driver();
  size_t free = 0, total = 0;
  KILN_CHECK(cuMemGetInfo(&free, &total));
  return {free, total};
}

void encodeTensorMap(void *out, void *global, int elementBytes,
                     const std::vector<uint64_t> &dims,
                     const std::vector<uint64_t> &strideBytes,
                     const std::vector<uint32_t> &box) {
  Driver &d = usable();
  // Copies move bits whatever the type; 4-byte elements are fp32 so that a
  // bulk reduction through the map adds floats (kiln's fp32 atomics).
  CUtensorMapDataType type = elementBytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                             : elementBytes == 2
                                 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  std::vector<uint32_t> elementStrides(dims.size(), 1);
  KILN_CHECK(cuTensorMapEncodeTiled(
                 static_cast<CUtensorMap *>(out), type, unsigned(dims.size()),
                 global, dims.data(), strideBytes.data(), box.data(),
                 elementStrides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE,
                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
             "cuTensorMapEncodeTiled");
}

} // namespace kiln::cuda
