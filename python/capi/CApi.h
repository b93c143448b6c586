//===- CApi.h - what libkiln_c's entry points share -------------*- C++ -*-===//
#ifndef KILN_PYTHON_CAPI_CAPI_H
#define KILN_PYTHON_CAPI_CAPI_H

#include "kiln_c.h"

#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"
#include "kiln/runtime/HostTensor.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace kiln::capi {

/// `message` into the caller's buffer, cut to fit and NUL-terminated.
inline void copyMessage(char *error, size_t size, const std::string &message) {
  if (error && size) {
    size_t n = std::min(size - 1, message.size());
    std::memcpy(error, message.data(), n);
    error[n] = '\0';
  }
}

/// Runs `body`, turning its exceptions into a return code and a message.
template <typename F> int guarded(char *error, size_t size, F &&body) {
  try {
    body();
    return KILN_C_OK;
  } catch (const cuda::CudaError &e) {
    copyMessage(error, size, e.what());
    return KILN_C_FAILED;
  } catch (const Error &e) {
    copyMessage(error, size, e.what());
    return KILN_C_BAD_INPUT;
  } catch (const std::exception &e) {
    copyMessage(error, size, std::string("kiln internal error: ") + e.what());
    return KILN_C_FAILED;
  }
}

/// The DType of a kiln_c dtype code; kiln::Error for an unknown code.
inline DType dtypeOfCode(int code) {
  switch (code) {
  case KILN_C_BF16:
    return DType::bf16;
  case KILN_C_F16:
    return DType::f16;
  case KILN_C_F32:
    return DType::f32;
  case KILN_C_I32:
    return DType::i32;
  case KILN_C_I64:
    return DType::i64;
  }
  throw Error("dtype code " + std::to_string(code) + " is not a kiln_c dtype");
}

/// The first `rank` sizes and strides of `t`, as a tensor of `dtype`.
inline TensorRef refOf(const kiln_c_tensor *t, DType dtype, int rank,
                       const char *name) {
  if (!t || !t->data)
    throw Error(std::string("tensor ") + name + " is missing");
  TensorRef r{t->data, dtype, {}, {}};
  for (int d = 0; d < rank; ++d) {
    r.shape.push_back(t->sizes[d]);
    r.strides.push_back(t->strides[d]);
  }
  return r;
}

} // namespace kiln::capi

#endif // KILN_PYTHON_CAPI_CAPI_H
