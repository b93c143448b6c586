//===- Error.h - kiln's exceptions ------------------------------*- C++ -*-===//
//
// Two kinds, as in Halide: kiln::Error is the user's fault (bad input, DSL
// misuse) and names the problem, with the user's file:line when there is one;
// kiln::InternalError is kiln's own bug.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_ERROR_H
#define KILN_RUNTIME_ERROR_H

#include <cstdint>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message)
      : std::runtime_error(message.empty()
                               ? "kiln::Error without a message (a kiln bug: "
                                 "please report it with the command)"
                               : message) {}
};

class InternalError : public std::logic_error {
public:
  explicit InternalError(const std::string &message)
      : std::logic_error("kiln internal error: " + message) {}
};

/// a·b, or kiln::Error("<what>: ... overflows 64-bit integers"): sizes are
/// multiplied through this before anything uses the product.
inline int64_t checkedMul(int64_t a, int64_t b, const std::string &what) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out))
    throw Error(what + ": " + std::to_string(a) + " x " + std::to_string(b) +
                " overflows 64-bit integers");
  return out;
}

} // namespace kiln

#endif // KILN_RUNTIME_ERROR_H
