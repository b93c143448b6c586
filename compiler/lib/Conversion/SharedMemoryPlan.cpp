//===- SharedMemoryPlan.cpp - shared-memory buffers placed by liveness ----===//
//
// Every buffer the lowering creates in dynamic shared memory (dot operand
// tiles, the stage ring, staged operands and their copies per stage, TMA
// staging tiles, the scratch area of layout conversions and reductions) is
// placed by when it holds data, so that a buffer can take the bytes of one
// whose last reader is done: an epilogue's conversion scratch or TMA staging
// tile takes the stage ring's bytes once the last pipelined loop is over.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "kiln/runtime/Error.h"

#include <algorithm>
#include <climits>

using namespace mlir;

namespace kiln::gpu {

int64_t SharedPlan::lowestFree(int64_t bytes,
                               const std::vector<int> &uses) const {
  auto conflicts = [&](const SharedBuffer &o) {
    return llvm::any_of(uses, [&](int u) { return u < 0 || o.liveAt(u); });
  };
  std::vector<int64_t> candidates{0};
  for (const SharedBuffer &o : buffers)
    if (conflicts(o))
      candidates.push_back(alignUp(o.offset + o.bytes));
  llvm::sort(candidates);
  for (int64_t at : candidates)
    if (llvm::none_of(buffers, [&](const SharedBuffer &o) {
          return conflicts(o) && at < o.offset + o.bytes &&
                 o.offset < at + bytes;
        }))
      return at;
  return alignUp(peak()); // not reached: the last candidate is free
}

int64_t SharedPlan::place(SharedBuffer b) {
  std::vector<int> uses;
  for (int op = b.first; op <= b.last; ++op)
    uses.push_back(op);
  b.offset = lowestFree(b.bytes, uses);
  buffers.push_back(b);
  return b.offset;
}

bool SharedPlan::overlapped(int64_t offset) const {
  auto it = llvm::find_if(
      buffers, [&](const SharedBuffer &b) { return b.offset == offset; });
  return it != buffers.end() &&
         llvm::any_of(buffers, [&](const SharedBuffer &o) {
           return &o != &*it && o.offset < it->offset + it->bytes &&
                  it->offset < o.offset + o.bytes;
         });
}

void SharedPlan::extend(const std::string &what, int last) {
  auto it = llvm::find_if(
      buffers, [&](const SharedBuffer &b) { return b.what == what; });
  if (it == buffers.end())
    throw InternalError("shared memory plan: no buffer to extend");
  const int from = it->last + 1;
  it->last = std::max(it->last, last);
  for (const SharedBuffer &o : buffers)
    for (int op = from; &o != &*it && op <= it->last; ++op)
      if (o.liveAt(op) && o.offset < it->offset + it->bytes &&
          it->offset < o.offset + o.bytes)
        throw InternalError("shared memory plan: " + it->what +
                            " extended over " + o.what);
}

int64_t SharedPlan::peak() const {
  int64_t top = 0;
  for (const SharedBuffer &b : buffers)
    top = std::max(top, b.offset + b.bytes);
  return top;
}

/// The name a staged operand's buffer is placed under (and found by, to
/// extend it, or to tell its copies' bytes from another buffer's).
static std::string stagedOperandName(const Lowerer &L, Value v) {
  return "staged operand " + L.lineOf(v.getDefiningOp());
}

int Lowerer::topIndexOf(Operation *op) const {
  if (bodyOps.empty())
    return -1;
  Operation *top = bodyOps.front()->getBlock()->findAncestorOpInBlock(*op);
  return top ? topIndex.lookup(top) : -1;
}

SharedBuffer Lowerer::sharedBuffer(std::string what, int64_t bytes, int first,
                                   int last, bool computeOnly) const {
  // Persistent CTAs run the body again for the next tile (its producer
  // fetches ahead into the ring): every buffer lives throughout, unless the
  // producer waits for each tile's end (gatedFrom) or only the compute
  // warps write it and they meet at each tile's end (tileLocalCompute).
  if (!persistentGrid.empty() && !gatedFrom &&
      !(computeOnly && tileLocalCompute))
    first = 0, last = int(bodyOps.size()) - 1;
  return {std::move(what), bytes, first, last};
}

/// The last top-level op that reads `v`'s shared-memory tile, through the
/// views (layout conversions, transposes) the dots read it by.
static int lastReader(const Lowerer &L, Value v) {
  int last = 0;
  SmallVector<Value> work{v};
  while (!work.empty())
    for (Operation *user : work.pop_back_val().getUsers()) {
      if (isa<ConvertLayoutOp, TransOp>(user))
        work.push_back(user->getResult(0));
      last = std::max(last, L.topIndexOf(user));
    }
  return last;
}

void Lowerer::planSharedMemory() {
  mlir::Block &body = src.getBody().front();
  for (Operation &op : body) {
    topIndex[&op] = int(bodyOps.size());
    bodyOps.push_back(&op);
  }
  // Each load that only feeds dots gets its own buffer: loads outside loops
  // each one; the pipelined loads a ring of numStages stages that every
  // loop shares, stage s of each loop in the same bytes (one buffer per
  // pipelined load of the loop; the stride is the largest loop's stage), so
  // that a stage released in one loop can be filled for the next without
  // touching the stages still being read; each top-level loop's other loads
  // a buffer of that loop's.
  sharedOperands = findSharedOperands(src);
  auto outermostLoop = [&](Operation *op) {
    Operation *loop = nullptr;
    for (Operation *p = op->getParentOp(); p && p != src.getOperation();
         p = p->getParentOp())
      if (isa<scf::ForOp>(p))
        loop = p;
    return loop;
  };
  // 1 KB alignment keeps every row start's swizzle bits zero, so that an
  // ldmatrix address can move across 16-byte chunks by XOR.
  auto bytesOf = [](LoadOp ld) {
    return SharedPlan::alignUp(ld.getType().getNumElements() * 2);
  };
  llvm::MapVector<Operation *, int64_t> loopStage, loopOwn;
  src.walk([&](LoadOp ld) {
    Operation *loop = outermostLoop(ld);
    if (!loop || !sharedOperands.count(ld.getResult()))
      return;
    const bool pipelined = canPrefetch(ld, nullptr);
    int64_t &at = (pipelined ? loopStage : loopOwn)[loop];
    smemRegion[ld.getResult()] = at; // within the stage or the loop's buffer
    if (pipelined)
      smemBufferBytes[ld.getResult()] = bytesOf(ld);
    at += bytesOf(ld);
  });
  for (auto &[loop, bytes] : loopStage)
    stageStride = std::max(stageStride, bytes);
  planStagedOperands();
  // mbarriers and the tile ring: small, fixed, live throughout.
  int64_t fixed = 0;
  planTma(fixed);
  planWarpRoles();
  planPingpong();
  planPersistent(fixed);
  planResidentTma(fixed);
  planOneShotTma(fixed);
  const int lastOp = int(bodyOps.size()) - 1;
  if (fixed)
    shared.place({"mbarriers", fixed, 0, lastOp});
  src.walk([&](LoadOp ld) {
    if (sharedOperands.count(ld.getResult()) && !outermostLoop(ld))
      smemRegion[ld.getResult()] = shared.place(sharedBuffer(
          "load " + lineOf(ld), bytesOf(ld), 0, lastReader(*this, ld)));
  });
  if (stageStride) {
    // The producer warpgroup (or the prologue) fills stages from the start
    // of the body to the last pipelined loop.
    int lastLoop = 0;
    for (auto &[loop, bytes] : loopStage)
      lastLoop = std::max(lastLoop, topIndex.lookup(loop));
    int64_t ring = shared.place(
        sharedBuffer("stage ring", stageStride * numStages, 0, lastLoop));
    for (auto &[v, bytes] : smemBufferBytes)
      smemRegion[v] += ring;
  }
  for (auto &[loop, bytes] : loopOwn) {
    int at = topIndex.lookup(loop);
    int64_t base =
        shared.place(sharedBuffer("loop tiles " + lineOf(loop), bytes, at, at));
    for (auto &[v, off] : smemRegion)
      if (!smemBufferBytes.count(v) && outermostLoop(v.getDefiningOp()) == loop)
        off += base;
  }
  // Persistent CTAs keep every buffer live throughout (sharedBuffer), so
  // liveness no longer puts the same operand staged in loops one after
  // another (a causal kernel's masked and unmasked loops) on the same bytes:
  // it takes them here. The loops run one after the other in every warp and
  // the ring runs on from one into the next, tile after tile, so the bytes
  // are handed on as from one iteration to the next of one loop.
  // (Each placed operand is taken by at most one operand per loop.)
  llvm::SmallVector<std::pair<Value, llvm::SmallVector<int>>> placedStaged;
  for (auto &[v, bytes] : stagedOperands) {
    Operation *def = v.getDefiningOp();
    int first = topIndexOf(def);
    if (!persistentGrid.empty() && !gatedFrom) {
      auto same = llvm::find_if(placedStaged, [&](const auto &placed) {
        Operation *o = placed.first.getDefiningOp();
        return placed.first.getType() == v.getType() &&
               !llvm::is_contained(placed.second, first) &&
               fedByRing(o->getParentOp()) && fedByRing(def->getParentOp());
      });
      if (same != placedStaged.end()) {
        same->second.push_back(first);
        bytes = stagedOperands.lookup(same->first);
        shared.extend(stagedOperandName(*this, same->first),
                      std::max(first, lastReader(*this, v)));
        continue;
      }
      placedStaged.push_back({v, {first}});
    }
    bytes = shared.place(sharedBuffer(stagedOperandName(*this, v), bytes, first,
                                      std::max(first, lastReader(*this, v)),
                                      /*computeOnly=*/true));
  }
  planTmaStores();
  planStagedCopies();
  if (tileLocalCompute)
    report.push_back(
        "persistent: the compute warps' own buffers (staged operands, their "
        "copies, TMA staging tiles) placed by liveness within a tile, the "
        "compute warps meeting at each tile's end (their bulk copies done "
        "reading): live across tiles, the copies of a staged operand did not "
        "fit");
}

void Lowerer::planStagedCopies() {
  // In a loop the producer's ring feeds, every compute warp finishes an
  // iteration's MMAs before it releases the iteration's stage, and passes
  // the barrier after the next iteration's staging only once every warp
  // did: with a copy per stage, an iteration writes its copy without the
  // barrier before the staging that waits for the slowest warp to have
  // read the previous contents. Placed after the TMA staging tiles, and
  // only where the copies fit. The same operand staged in loops one after
  // another (a causal kernel's masked and unmasked loops) holds the same
  // bytes, and the ring's stages run on from one loop into the next: such
  // a group shares its copies, as if its loops were one.
  if (numStages < 2)
    return;
  llvm::DenseSet<Value> planned;
  for (auto &[v, offset] : stagedOperands) {
    if (planned.contains(v))
      continue;
    const int64_t bytes = stagedBytes(cast<RankedTensorType>(v.getType()));
    SmallVector<Value> group;
    for (auto &[u, at] : stagedOperands)
      if (at == offset)
        group.push_back(u);
    planned.insert(group.begin(), group.end());
    int first = INT_MAX, last = 0;
    bool ok = true;
    for (Value u : group) {
      Operation *def = u.getDefiningOp();
      ok = ok && fedByRing(def->getParentOp()) &&
           stagedBytes(cast<RankedTensorType>(u.getType())) == bytes;
      first = std::min(first, topIndexOf(def));
      last = std::max({last, topIndexOf(def), lastReader(*this, u)});
    }
    // No other buffer may take these bytes: a warp writes its copy 0 while
    // others may still read what was there. (Within a tile, one that holds
    // data only outside the loops, such as an epilogue's staging tile, is
    // behind a barrier of every compute warp on either side: at its first
    // write, and at the tile's end.)
    auto apart = [&](const SharedBuffer &o) {
      return tileLocalCompute && (o.last < first || last < o.first);
    };
    for (const SharedBuffer &o : shared.all()) {
      if (apart(o))
        continue;
      const bool member =
          o.offset == offset && o.bytes == bytes &&
          llvm::any_of(group, [&](Value u) {
            const int at = topIndexOf(u.getDefiningOp());
            const SharedBuffer own =
                sharedBuffer("", bytes, at, std::max(at, lastReader(*this, u)),
                             /*computeOnly=*/true);
            // (Its last op may be a later loop's: SharedPlan::extend.)
            return o.first == own.first && o.last >= own.last &&
                   o.what == stagedOperandName(*this, u);
          });
      if (!member && o.offset < offset + bytes && offset < o.offset + o.bytes)
        ok = false;
    }
    // Crowded out by buffers that persistent CTAs keep live across tiles:
    // worth a lowering that places the compute warps' own by liveness.
    auto crowded = [&] {
      if (!persistentGrid.empty() && producerWarps && !gatedFrom &&
          !tileLocalCompute &&
          llvm::all_of(group, [&](Value u) {
            return fedByRing(u.getDefiningOp()->getParentOp());
          }))
        copiesCrowded = true;
    };
    if (!ok) {
      crowded();
      continue;
    }
    shared.place(sharedBuffer(
        stagedOperandName(*this, v) + " (copies for stages 1-" +
            std::to_string(numStages - 1) +
            (group.size() > 1
                 ? ", its " + std::to_string(group.size()) + " loops'"
                 : std::string()) +
            ")",
        bytes * (numStages - 1), first, last, /*computeOnly=*/true));
    const SharedBuffer &copies = shared.all().back();
    if (shared.peak() > sharedLimit ||
        llvm::any_of(shared.all(), [&](const SharedBuffer &o) {
          return &o != &copies && !apart(o) &&
                 o.offset < copies.offset + copies.bytes &&
                 copies.offset < o.offset + o.bytes;
        })) {
      shared.unplace();
      crowded();
      continue;
    }
    for (Value u : group)
      stagedCopies[u] = shared.all().back().offset;
  }
}

Value Lowerer::scratchBaseValue() {
  auto c = arith::ConstantIntOp::create(b, loc, 0, 32);
  scratchBaseOps.push_back(c);
  scratchUses.push_back(currentTop);
  return c;
}

int64_t Lowerer::placeScratch() {
  if (smemBytes > 0 && !scratchUses.empty())
    scratchBase = shared.lowestFree(smemBytes, scratchUses);
  for (arith::ConstantOp c : scratchBaseOps)
    c.setValueAttr(b.getI32IntegerAttr(scratchBase));
  const int64_t total = std::max(shared.peak(), scratchBase + smemBytes);
  if (total == 0)
    return 0;
  std::string line =
      "shared memory: " + std::to_string(total) + " bytes, placed by liveness:";
  auto range = [](int64_t at, int64_t bytes) {
    return " [" + std::to_string(at) + ", " + std::to_string(at + bytes) + ")";
  };
  const int lastOp = int(bodyOps.size()) - 1;
  for (const SharedBuffer &s : shared.all())
    line += " " + s.what + range(s.offset, s.bytes) +
            (s.last < lastOp ? " until " + lineOf(bodyOps[s.last]) : "") + ";";
  if (smemBytes) {
    line += " scratch of conversions and reductions" +
            range(scratchBase, smemBytes);
    std::string shares;
    for (const SharedBuffer &s : shared.all())
      if (s.offset < scratchBase + smemBytes &&
          scratchBase < s.offset + s.bytes)
        shares += (shares.empty() ? "" : ", ") + s.what;
    if (!shares.empty())
      line += " in the bytes of: " + shares + " (no longer read there)";
  }
  report.push_back(line);
  return total;
}

} // namespace kiln::gpu
