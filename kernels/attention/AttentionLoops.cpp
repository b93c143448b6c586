//===- AttentionLoops.cpp - how the forward kernel loops over keys --------===//
//
// The predicates AttentionLoops.h declares: which key loops a resolved
// Config and shape take, shared by the kernel (Forward.cpp) and its
// schedule defaults (Config.cpp).
//
//===----------------------------------------------------------------------===//
#include "AttentionLoops.h"

#include "kiln/runtime/Error.h"

#include <numeric>
#include <string>

namespace kiln::kernels {

void checkConfig(const AttentionConfig &c) {
  for (int64_t b : {c.blockM, c.blockN, c.blockNDiagonal, c.blockNRaggedEnd})
    if (b < 16 || (b & (b - 1)))
      throw Error("attention: blockM, blockN, blockNDiagonal and "
                  "blockNRaggedEnd must be powers of two >= 16, got " +
                  std::to_string(b));
  if (c.blockNRaggedEnd > c.blockN)
    throw Error("attention: blockNRaggedEnd (" +
                std::to_string(c.blockNRaggedEnd) +
                ") must not exceed blockN (" + std::to_string(c.blockN) + ")");
}

int64_t unmaskedKeys(const AttentionShape &s, int64_t blockN) {
  if (s.seqK % blockN == 0)
    return s.seqK;
  return s.seqK / blockN < 16 ? 0 : (s.seqK / blockN - 1) * blockN;
}

bool wholeKeyBlocks(const AttentionShape &s, const AttentionConfig &c) {
  return !s.keyLengths && s.seqK % keyBlockMultiple(c) == 0;
}

int64_t keyBlockMultiple(const AttentionConfig &c) {
  return std::lcm(c.blockN, c.blockNDiagonal ? c.blockNDiagonal : c.blockN);
}

int overlappedLoops(const AttentionShape &s, const AttentionConfig &c) {
  // A run-time ragged end's loop runs once: kiln-overlap-dots leaves it, and
  // so the narrow step left of an end-aligned row block's diagonal, and the
  // diagonal's loops where the narrow keys join it in diagonal blocks as
  // tall as the row block (both then run at most once).
  if (s.causal)
    return s.keyLengths || diagonalFirst(s, c) ||
                   (narrowInDiagonal(s, c) && c.blockNDiagonal == c.blockM)
               ? 1
               : 2;
  return c.staticShapes <= 0 ? 1 : keyLoops(s, c);
}

bool rowsAlignedToEnd(const AttentionShape &s, const AttentionConfig &c) {
  return s.causal && !s.keyLengths && c.staticShapes <= 0 &&
         c.alignRowsToEnd > 0 && c.blockN > 0 && c.blockNDiagonal > 0 &&
         !wholeKeyBlocks(s, c) && c.blockM % c.blockN == 0 &&
         c.blockM % c.blockNDiagonal == 0 && c.blockNRaggedEnd <= c.blockN;
}

bool narrowInDiagonal(const AttentionShape &s, const AttentionConfig &c) {
  return rowsAlignedToEnd(s, c) && c.narrowStepInDiagonal > 0;
}

std::vector<int64_t> raggedEndBlocks(const AttentionConfig &c) {
  const int64_t blockN = c.blockN ? c.blockN : 128;
  if (c.blockNRaggedEnd > 0 && c.blockNRaggedEnd < blockN)
    return {blockN, c.blockNRaggedEnd};
  return {blockN};
}

bool diagonalFirst(const AttentionShape &s, const AttentionConfig &c) {
  return s.causal && !s.keyLengths && c.maskedBlockFirst > 0 && c.overlap > 0 &&
         !rowsAlignedToEnd(s, c) && c.blockNDiagonal == c.blockM &&
         c.blockM == c.blockN;
}

bool raggedEndFirst(const AttentionShape &s, const AttentionConfig &c) {
  return !s.causal && c.staticShapes <= 0 && c.maskedBlockFirst > 0 &&
         c.overlap > 0 && !wholeKeyBlocks(s, c);
}

bool oneShotLoadsApply(const AttentionConfig &c) {
  return c.warpSpecialize <= 0 && c.persistent <= 0;
}

int keyLoops(const AttentionShape &s, const AttentionConfig &c) {
  const int64_t blockN = c.blockN ? c.blockN : 128;
  if (s.causal) // with key lengths, one loop of blocks that end at a length
    return s.keyLengths ? 1 : rowsAlignedToEnd(s, c) ? 3 : 2;
  if (c.staticShapes <= 0) // run-time Nk: whole blocks, or ragged end loops
    return s.seqK % blockN == 0 && !s.keyLengths ? 1
           : raggedEndFirst(s, c)                ? 2
                                  : 1 + int(raggedEndBlocks(c).size()) -
                                        (c.raggedEndInLoop > 0 ? 1 : 0);
  const int64_t split = unmaskedKeys(s, blockN);
  return split > 0 && split < s.seqK ? 2 : 1;
}

} // namespace kiln::kernels
