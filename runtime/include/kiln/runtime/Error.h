//===- Error.h - kiln's exceptions ------------------------------*- C++ -*-===//
//
// Two kinds, as in Halide: kiln::Error is the user's fault (bad input, DSL
// misuse) and names the problem, with the user's file:line when there is one;
// kiln::InternalError is kiln's own bug.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_ERROR_H
#define KILN_RUNTIME_ERROR_H

#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

class InternalError : public std::logic_error {
public:
  explicit InternalError(const std::string &message)
      : std::logic_error("kiln internal error: " + message) {}
};

} // namespace kiln

#endif // KILN_RUNTIME_ERROR_H
