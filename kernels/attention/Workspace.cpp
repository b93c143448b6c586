//===- Workspace.cpp - where the attention workspaces lie -----------------===//
//
// The one description of the backward's and the split forward's workspace
// tensors (names, types, shapes, offsets) that every caller allocates and
// binds from.
//
//===----------------------------------------------------------------------===//
#include "kiln/kernels/AttentionBackward.h"

namespace kiln::kernels {

void Workspace::add(const char *name, DType dtype, std::vector<int64_t> shape) {
  int64_t bytes = int64_t(dtypeSize(dtype));
  for (int64_t d : shape)
    bytes *= d;
  tensors.push_back({name, dtype, std::move(shape), elements});
  elements += (bytes + 15) / 16 * 4; // the next one 16-byte aligned
}

std::map<std::string, TensorRef> Workspace::refs(void *base) const {
  std::map<std::string, TensorRef> out;
  for (const WorkspaceTensor &t : tensors)
    out[t.name] = {static_cast<float *>(base) + t.offset, t.dtype, t.shape,
                   contiguousStrides(t.shape)};
  return out;
}

BackwardWorkspace::BackwardWorkspace(int64_t batch, int64_t heads, int64_t seqQ,
                                     int64_t headDim) {
  const int64_t row = statsRowLength(seqQ);
  add("Stats", DType::f32, {batch, heads, 2, row});
  add("dQaccum", DType::f32, {batch, heads, seqQ, headDim});
  add("dQarrivals", DType::i32, {batch, heads, kArrivalStride});
  add("FoldedStats", DType::bf16, {batch, heads, kFoldedStatsRows, row});
}

SplitKeysWorkspace::SplitKeysWorkspace(const AttentionShape &s,
                                       int64_t ranges) {
  add("OSplit", DType::f32, {ranges, s.batch, s.heads, s.seqQ, s.headDim});
  add("LSESplit", DType::f32, {ranges, s.batch, s.heads, s.seqQ});
}

} // namespace kiln::kernels
