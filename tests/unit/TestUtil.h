//===- TestUtil.h - helpers shared by kiln's gtests -------------*- C++ -*-===//
#ifndef KILN_TESTS_UNIT_TESTUTIL_H
#define KILN_TESTS_UNIT_TESTUTIL_H

#include "kiln/runtime/Error.h"

#include <string>

namespace kiln::test {

/// The message of the kiln::Error that f throws, or "<no error>".
template <class F> std::string errorOf(F &&f) {
  try {
    f();
  } catch (const kiln::Error &e) {
    return e.what();
  }
  return "<no error>";
}

/// Occurrences of `what` in `text` (overlapping ones too).
inline size_t countOf(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1))
    ++n;
  return n;
}

/// Skips the test, saying why, when no GPU can be used (needs
/// kiln/runtime/Cuda.h).
#define REQUIRE_GPU()                                                          \
  do {                                                                         \
    std::string why;                                                           \
    if (!::kiln::cuda::available(&why))                                        \
      GTEST_SKIP() << "SKIPPED: no GPU: " << why;                              \
  } while (0)

/// "file:line" of a line of the including file, as the DSL reports it.
#define KILN_FILE_LINE(line)                                                   \
  (std::string(__FILE__) + ":" + std::to_string(line))

} // namespace kiln::test

#endif // KILN_TESTS_UNIT_TESTUTIL_H
