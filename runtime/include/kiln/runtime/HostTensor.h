//===- HostTensor.h - strided tensors in host memory ------------*- C++ -*-===//
#ifndef KILN_RUNTIME_HOSTTENSOR_H
#define KILN_RUNTIME_HOSTTENSOR_H

#include "kiln/runtime/DType.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kiln {

/// What a kernel needs to know of a tensor argument: where it lives, its
/// element type, shape and strides (in elements). Host or device memory alike.
struct TensorRef {
  void *data = nullptr;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

/// A tensor in host memory with any non-negative strides.
class HostTensor {
public:
  /// A contiguous (row-major) tensor, zero-filled.
  HostTensor(DType dtype, std::vector<int64_t> shape);
  /// A tensor with the given strides; storage covers the largest offset.
  HostTensor(DType dtype, std::vector<int64_t> shape,
             std::vector<int64_t> strides);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  const std::vector<int64_t> &strides() const { return strides_; }
  int64_t numel() const;
  void *data() { return storage_.data(); }
  const void *data() const { return storage_.data(); }
  size_t storageBytes() const { return storage_.size(); }
  TensorRef ref() { return {data(), dtype_, shape_, strides_}; }

  /// Element at a multi-index, as double; set rounds to the dtype.
  double at(std::span<const int64_t> index) const;
  void set(std::span<const int64_t> index, double value);
  /// Element number i in row-major logical order.
  double flatAt(int64_t i) const;
  void flatSet(int64_t i, double value);

  /// Uniform values in [lo, hi) from a seeded generator.
  void fillRandom(uint64_t seed, double lo = -1.0, double hi = 1.0);
  /// Fills every byte of storage with 0xFF: NaN for float types, so an
  /// element a kernel forgot to write shows up in every comparison.
  void poison();

private:
  int64_t offsetOf(std::span<const int64_t> index) const;
  int64_t offsetOfFlat(int64_t i) const;
  DType dtype_;
  std::vector<int64_t> shape_, strides_;
  std::vector<unsigned char> storage_;
};

/// Row-major strides of a shape.
std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &shape);

/// Comparison of a result against a reference of the same shape.
struct ErrorStats {
  double maxAbs = 0;     ///< max |out - ref|
  double relative = 0;   ///< ||out - ref||_2 / ||ref||_2
  /// Elements of out that are NaN or inf (but for the reference's own
  /// infinity: that element matches).
  int64_t nonFinite = 0;
};
ErrorStats compareTensors(const HostTensor &out, const HostTensor &ref);

std::string shapeToString(const std::vector<int64_t> &shape);

} // namespace kiln

#endif // KILN_RUNTIME_HOSTTENSOR_H
