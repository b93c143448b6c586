//===- Json.h - the JSON the kiln command writes ----------------*- C++ -*-===//
//
// Every JSON document the CLI prints or writes is built as llvm::json values
// (escaping, numbers) and printed here.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TOOLS_JSON_H
#define KILN_TOOLS_JSON_H

#include "kiln/runtime/DType.h"

#include "llvm/Support/JSON.h"

#include <string>

namespace kiln::cli {

/// `value` as JSON text: indented by `indent` spaces a level, or on one line
/// with 0. No trailing newline.
std::string jsonText(llvm::json::Value value, unsigned indent = 1);

/// One row of `kiln bench attention --json` (the form peers.py's
/// --with-json reads): peer kiln, dtype, B, H, N, D, causal, ms, tflops.
llvm::json::Object attentionRow(DType dtype, int64_t B, int64_t H, int64_t N,
                                int64_t D, bool causal, double ms,
                                double tflops);

/// Writes jsonText(value) and a newline to `path`; throws kiln::Error when
/// the file cannot be written.
void writeJson(const std::string &path, llvm::json::Value value);

} // namespace kiln::cli

#endif // KILN_TOOLS_JSON_H
