//===- CodegenUtil.h - helpers of the codegen tests -------------*- C++ -*-===//
#ifndef KILN_TESTS_UNIT_CODEGENUTIL_H
#define KILN_TESTS_UNIT_CODEGENUTIL_H

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/Attention.h"

#include <string>

namespace kiln::test {

/// One batch, one head, N queries and keys of head dim D.
inline kernels::AttentionShape selfAttention(int64_t n, int64_t d,
                                             bool causal) {
  kernels::AttentionShape s;
  s.seqQ = s.seqK = n;
  s.headDim = d;
  s.causal = causal;
  return s;
}

/// The lowering report as one text, a line per entry.
inline std::string reportOf(const CompiledKernel &c) {
  std::string text;
  for (const std::string &line : c.report)
    text += line + "\n";
  return text;
}

} // namespace kiln::test

#endif // KILN_TESTS_UNIT_CODEGENUTIL_H
