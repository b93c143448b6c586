//===- Json.h - the JSON the kiln command writes ----------------*- C++ -*-===//
//
// Every JSON document the CLI prints or writes is built as llvm::json values
// (escaping, numbers) and printed here.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TOOLS_JSON_H
#define KILN_TOOLS_JSON_H

#include "llvm/Support/JSON.h"

#include <string>

namespace kiln::cli {

/// `value` as JSON text: indented by `indent` spaces a level, or on one line
/// with 0. No trailing newline.
std::string jsonText(llvm::json::Value value, unsigned indent = 1);

/// Writes jsonText(value) and a newline to `path`; throws kiln::Error when
/// the file cannot be written.
void writeJson(const std::string &path, llvm::json::Value value);

} // namespace kiln::cli

#endif // KILN_TOOLS_JSON_H
