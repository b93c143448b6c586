//===- SharedMemoryPlan.h - shared-memory buffers placed by liveness -*- C++
//-*-===//
#ifndef KILN_LIB_CONVERSION_SHAREDMEMORYPLAN_H
#define KILN_LIB_CONVERSION_SHAREDMEMORYPLAN_H

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::gpu {

/// A region of a kernel's dynamic shared memory and when it holds data:
/// from the `first` to the `last` op of the kernel's body (indices of the
/// body's top-level ops, inclusive; a loop counts as one op).
struct SharedBuffer {
  std::string what;
  int64_t bytes = 0;
  int first = 0, last = 0;
  int64_t offset = -1;
  bool liveAt(int op) const { return first <= op && op <= last; }
};

/// First-fit placement in the order buffers are added (Triton's and most
/// compilers' scheme): each goes at the lowest 1 KB aligned offset where it
/// overlaps no placed buffer whose ops it shares. Added in the sequential
/// order, no buffer lands higher than a plain stack would put it, so the
/// peak never exceeds the stack's.
class SharedPlan {
public:
  static constexpr int64_t kAlign = 1024;
  /// `bytes` rounded up to kAlign: what a buffer of them occupies.
  static int64_t alignUp(int64_t bytes) {
    return (bytes + kAlign - 1) / kAlign * kAlign;
  }
  /// Places `b` and keeps it; returns its offset.
  int64_t place(SharedBuffer b);
  /// Removes the buffer placed last.
  void unplace() { buffers.pop_back(); }
  /// Keeps the buffer `what` live to op `last` (a later loop holds its
  /// bytes too); throws kiln::InternalError where another buffer live then
  /// shares them.
  void extend(const std::string &what, int last);
  /// The lowest offset for `bytes` bytes used at each op of `uses` (-1: at
  /// an op that cannot be told, overlapping every buffer).
  int64_t lowestFree(int64_t bytes, const std::vector<int> &uses) const;
  /// Whether another buffer shares bytes with the one at `offset`.
  bool overlapped(int64_t offset) const;
  /// The end of the highest buffer.
  int64_t peak() const;
  const std::vector<SharedBuffer> &all() const { return buffers; }

private:
  std::vector<SharedBuffer> buffers;
};

} // namespace kiln::gpu

#endif // KILN_LIB_CONVERSION_SHAREDMEMORYPLAN_H
