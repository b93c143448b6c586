//===- Log.h - what KILN_LOG asks kiln to print -----------------*- C++ -*-===//
#ifndef KILN_COMPILER_LOG_H
#define KILN_COMPILER_LOG_H

#include <string_view>

namespace kiln {

/// Whether KILN_LOG (a comma-separated list) names `what`; "launch" is the
/// item it knows. An item it does not know is a kiln::Error, not a log that
/// silently never prints.
bool logs(std::string_view what);

} // namespace kiln

#endif // KILN_COMPILER_LOG_H
