//===- HostTensor.cpp - strided tensors in host memory --------------------===//
#include "kiln/runtime/HostTensor.h"
#include "kiln/runtime/Error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace kiln {

std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc = checkedMul(acc, std::max<int64_t>(shape[i], 1),
                     "the strides of shape " + shapeToString(shape));
  }
  return s;
}

std::string shapeToString(const std::vector<int64_t> &shape) {
  if (shape.empty())
    return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape)
    : HostTensor(dtype, shape, contiguousStrides(shape)) {}

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape,
                       std::vector<int64_t> strides)
    : dtype_(dtype), shape_(std::move(shape)), strides_(std::move(strides)) {
  if (strides_.size() != shape_.size())
    throw Error("HostTensor: " + std::to_string(strides_.size()) +
                " strides for a " + shapeToString(shape_) + " tensor");
  const std::string what = "HostTensor " + shapeToString(shape_);
  int64_t last = 0;
  bool empty = false;
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (shape_[i] < 0 || strides_[i] < 0)
      throw Error("HostTensor: negative size or stride in shape " +
                  shapeToString(shape_));
    empty |= shape_[i] == 0;
    if (!empty &&
        __builtin_add_overflow(
            last, checkedMul(shape_[i] - 1, strides_[i], what), &last))
      throw Error(what + ": its last element's offset overflows 64-bit "
                         "integers");
  }
  if (empty)
    return;
  int64_t elements = 1;
  for (int64_t d : shape_)
    elements = checkedMul(elements, d, what);
  int64_t bytes = checkedMul(last + 1, int64_t(dtypeSize(dtype_)), what);
  try {
    storage_.assign(size_t(bytes), 0);
  } catch (const std::exception &) { // bad_alloc, length_error
    throw Error(what + ": cannot allocate " + std::to_string(bytes) +
                " bytes of host memory");
  }
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_)
    n *= d; // the constructor allocated them all: no overflow
  return n;
}

int64_t HostTensor::offsetOf(std::span<const int64_t> index) const {
  if (index.size() != shape_.size())
    throw Error("HostTensor: index of rank " + std::to_string(index.size()) +
                " into a " + shapeToString(shape_) + " tensor");
  int64_t off = 0;
  for (size_t i = 0; i < index.size(); ++i) {
    if (index[i] < 0 || index[i] >= shape_[i])
      throw Error("HostTensor: index out of range for shape " +
                  shapeToString(shape_));
    off += index[i] * strides_[i];
  }
  return off;
}

int64_t HostTensor::offsetOfFlat(int64_t i) const {
  int64_t off = 0;
  for (size_t d = shape_.size(); d-- > 0;) {
    off += (i % shape_[d]) * strides_[d];
    i /= shape_[d];
  }
  return off;
}

static double loadElem(const unsigned char *p, DType t) {
  switch (t) {
  case DType::f32: {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  case DType::f16: {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return halfToFloat(h);
  }
  case DType::bf16: {
    uint16_t b;
    std::memcpy(&b, p, 2);
    return bf16ToFloat(b);
  }
  case DType::i1:
    return *p ? 1.0 : 0.0;
  case DType::i32: {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case DType::i64: {
    int64_t v;
    std::memcpy(&v, p, 8);
    return double(v);
  }
  }
  return 0;
}

static void storeElem(unsigned char *p, DType t, double v) {
  switch (t) {
  case DType::f32: {
    float f = float(v);
    std::memcpy(p, &f, 4);
    return;
  }
  case DType::f16: {
    uint16_t h = floatToHalf(float(v));
    std::memcpy(p, &h, 2);
    return;
  }
  case DType::bf16: {
    uint16_t b = floatToBf16(float(v));
    std::memcpy(p, &b, 2);
    return;
  }
  case DType::i1:
    *p = v != 0;
    return;
  case DType::i32: {
    int32_t x = int32_t(v);
    std::memcpy(p, &x, 4);
    return;
  }
  case DType::i64: {
    int64_t x = int64_t(v);
    std::memcpy(p, &x, 8);
    return;
  }
  }
}

double HostTensor::at(std::span<const int64_t> index) const {
  return loadElem(storage_.data() + offsetOf(index) * dtypeSize(dtype_),
                  dtype_);
}
void HostTensor::set(std::span<const int64_t> index, double value) {
  storeElem(storage_.data() + offsetOf(index) * dtypeSize(dtype_), dtype_,
            value);
}
double HostTensor::flatAt(int64_t i) const {
  return loadElem(storage_.data() + offsetOfFlat(i) * dtypeSize(dtype_),
                  dtype_);
}
void HostTensor::flatSet(int64_t i, double value) {
  storeElem(storage_.data() + offsetOfFlat(i) * dtypeSize(dtype_), dtype_,
            value);
}

void HostTensor::fillRandom(uint64_t seed, double lo, double hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0, n = numel(); i < n; ++i)
    flatSet(i, isFloat(dtype_) ? dist(gen) : std::floor(dist(gen)));
}

void HostTensor::poison() {
  std::memset(storage_.data(), 0xFF, storage_.size());
}

ErrorStats compareTensors(const HostTensor &out, const HostTensor &ref) {
  if (out.shape() != ref.shape())
    throw Error("compareTensors: shapes differ: " + shapeToString(out.shape()) +
                " vs " + shapeToString(ref.shape()));
  ErrorStats s;
  double diff2 = 0, ref2 = 0;
  for (int64_t i = 0, n = out.numel(); i < n; ++i) {
    double o = out.flatAt(i), r = ref.flatAt(i);
    if (std::isinf(o) && o == r) // the same infinity (a row of no keys' LSE)
      continue;
    if (!std::isfinite(o)) {
      ++s.nonFinite;
      continue;
    }
    double d = std::abs(o - r);
    s.maxAbs = std::max(s.maxAbs, d);
    diff2 += d * d;
    ref2 += r * r;
  }
  s.relative = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  if (s.nonFinite) // a NaN anywhere fails every threshold
    s.relative = s.maxAbs = std::numeric_limits<double>::infinity();
  return s;
}

} // namespace kiln
