//===- Params.h - kernel parameters and argument values ---------*- C++ -*-===//
#ifndef KILN_RUNTIME_PARAMS_H
#define KILN_RUNTIME_PARAMS_H

#include "kiln/runtime/DType.h"

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace kiln {

/// One parameter of a kernel function, in order.
struct ParamInfo {
  enum class Kind { Pointer, Scalar };
  std::string name;
  Kind kind;
  DType dtype; ///< pointee type for pointers, the value's type for scalars
};

/// A tensor argument: one pointer parameter plus one stride parameter per
/// dimension. Its shape is compiled into the kernel.
struct TensorParamInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  int pointerParam;
  std::vector<int> strideParams;
};

/// A value for one parameter: a pointer (host or device), an integer, or a
/// float.
using ArgValue = std::variant<void *, int64_t, double>;

} // namespace kiln

#endif // KILN_RUNTIME_PARAMS_H
