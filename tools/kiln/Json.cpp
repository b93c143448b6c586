//===- Json.cpp - the JSON the kiln command writes ------------------------===//
#include "Json.h"

#include "kiln/runtime/Error.h"

#include "llvm/Support/raw_ostream.h"

#include <fstream>

namespace kiln::cli {

std::string jsonText(llvm::json::Value value, unsigned indent) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::json::OStream(os, indent).value(value);
  return text;
}

llvm::json::Object attentionRow(DType dtype, int64_t B, int64_t H, int64_t N,
                                int64_t D, bool causal, double ms,
                                double tflops) {
  return llvm::json::Object{
      {"peer", "kiln"},   {"dtype", dtype == DType::bf16 ? "bf16" : "fp16"},
      {"B", B},           {"H", H},
      {"N", N},           {"D", D},
      {"causal", causal}, {"ms", ms},
      {"tflops", tflops}};
}

void writeJson(const std::string &path, llvm::json::Value value) {
  std::ofstream out(path);
  out << jsonText(std::move(value)) << "\n";
  if (!out)
    throw Error("cannot write " + path);
}

} // namespace kiln::cli
