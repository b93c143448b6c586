//===- Lowering.h - kiln IR to per-thread LLVM/NVVM code --------*- C++ -*-===//
//
// Internal to compiler/lib/Conversion. The lowering walks a kernel's kiln IR
// once, in order, and emits an llvm.func in which every tile has become the
// registers of one thread under a Layout.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_LIB_CONVERSION_LOWERING_H
#define KILN_LIB_CONVERSION_LOWERING_H

#include "GlobalAccess.h"
#include "IndexFacts.h"
#include "LoweredTile.h"
#include "LowererState.h"

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/Layout.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

#include <map>
#include <optional>

namespace kiln::gpu {

/// Loads of 16-bit tiles whose every use is a dot operand (through the
/// conversion to the operand layout, and a transpose): they go to shared
/// memory, not registers.
llvm::DenseSet<mlir::Value> findSharedOperands(mlir::func::FuncOp func);

/// Throws kiln::Error when a dot cannot run on the tensor cores (operand
/// types, shape not in multiples of 16x8x16): checked for every dot before
/// anything is lowered.
void checkDotOnTensorCores(DotOp op);

/// The lowering of one kernel. Its state, grouped by what it serves, is in
/// the bases (LowererState.h); its methods, here, are defined in the
/// Lower*.cpp files that their comments name.
class Lowerer : public CodeState,
                public SharedMemoryState,
                public TmaState,
                public ArrivalState,
                public WarpRoleState,
                public PersistentState {
public:
  /// `src` must be laid out (kiln-assign-layouts): every tile's type has a
  /// #kiln.layout encoding, and conversions are kiln.convert_layout ops.
  Lowerer(mlir::func::FuncOp src, int numWarps, int numStages = 2);
  /// Emits the kernel into `module`; returns the dynamic shared-memory bytes
  /// it needs.
  int64_t run(mlir::ModuleOp module);

  // Shared with the Lower*.cpp files.
  mlir::OpBuilder b;
  mlir::Location loc;
  int numWarps;
  int numStages;

  /// The registers of tile `v`, which must already be in `want` (or be
  /// uniform): conversions are explicit ops, never implied by a use.
  Regs regsIn(mlir::Value v, const Layout &want);
  /// The layout of a laid-out tile value.
  Layout layoutOf(mlir::Value v) const;
  mlir::Value scalarOf(mlir::Value v) { return scalars.lookup(v); }
  mlir::Value i32(int64_t v);
  mlir::Value i64(int64_t v);
  /// Per dimension, the coordinate part contributed by this thread's lane and
  /// warp bits under `l`.
  llvm::SmallVector<mlir::Value> threadCoord(const Layout &l,
                                             bool lanes = true);
  /// Whether this thread holds the first copy of replicated data.
  mlir::Value isOwner(const Layout &l);
  void convertLayout(const Regs &in, const Layout &to, mlir::Type elem,
                     llvm::SmallVectorImpl<mlir::Value> &out);
  void barrier();
  /// Makes this thread's shared-memory writes visible to the async proxy
  /// (wgmma operand reads, TMA stores).
  void fenceSharedForAsync();
  /// Emits `body` under `if (cond)`.
  void ifThen(mlir::Value cond, llvm::function_ref<void()> body);
  /// lane and warp from a fresh, opaque read of %tid.x (reloadThreadIds).
  void rereadThreadId();
  /// %tid.x through an opaque read that LLVM cannot merge with others.
  mlir::Value freshThreadId();
  /// The warp index of thread id `tid`, taken from lane 0 by a shuffle so
  /// that ptxas knows it is the same in every lane of the warp.
  mlir::Value warpIndexOf(mlir::Value tid);
  mlir::Value smemPtr(mlir::Value byteOffset);

  Regs lowerLoad(LoadOp op);
  /// A load's padding as an `elem` constant, or a vector of `vec` of them.
  mlir::Value paddingValue(mlir::Type elem, double padding, int64_t vec);
  /// Rows chosen by an index tile (LowerGather.cpp); elements per load.
  Regs lowerGather(GatherOp op);
  /// A select whose condition compares index ranges, under a per-thread
  /// check that skips it where every element passes (LowerMaskedSelect.cpp);
  /// nullopt for other selects.
  std::optional<Regs> lowerMaskedSelect(mlir::arith::SelectOp op,
                                        const Layout &l);
  /// The lowered tile `v`, or null before it is lowered.
  const Regs *loweredTile(mlir::Value v) const {
    auto it = tiles.find(v);
    return it == tiles.end() ? nullptr : &it->second;
  }
  int64_t gatherWidth(GatherOp op);
  /// One i32 from memory, the same in every thread.
  mlir::Value lowerLoadIndex(LoadIndexOp op);
  /// The program's arrival at a counter (kiln.arrive): after its writes,
  /// one atomic add by one thread, the old count in every thread.
  mlir::Value lowerArrive(ArriveOp op);
  /// Waits for a counter (kiln.wait_count): one thread polls, then a
  /// barrier; the producer's thread polls for itself (`producer`).
  void lowerWaitCount(WaitCountOp op, bool producer = false);
  /// Whether the kernel has an arrival whose count is unused.
  bool hasUnusedArrival();
  /// Compute warps: message `addr` (0: none; -1: the last) to the arriving
  /// thread.
  void sendArrival(mlir::Value addr);
  /// The producer warpgroup's arriving thread: its loop over the messages.
  void makeArrivals();
  /// Message k's slot in the arrival ring: its byte `base` + 8 (k mod 2)
  /// (0: address, 16: full, 32: empty), and the phase of its use.
  mlir::Value arrivalSlot(mlir::Value k, int64_t base);
  mlir::Value arrivalPhase(mlir::Value k);
  /// Device-scope release and +1 at the counter at `addr` (an i64; 0: none).
  void releaseCounter(mlir::Value addr);
  void planDeferredArrivals();
  void lowerDeferredArrive(ArriveOp op);
  /// After the CTA's last program: the pending arrival, once its writes
  /// have completed.
  void flushDeferredArrival();
  /// One thread makes the pending arrival (if any).
  void releasePendingArrival();
  /// At the kernel's start and end: launch_dependents where it arrives at
  /// counters, wait where it overlaps the previous launch.
  void startGridDependencies();
  void endGridDependencies();
  void lowerStore(StoreOp op);
  /// One atomic read-modify-write per element (red/atom.global), masked.
  void lowerAtomic(AtomicRMWOp op);
  Regs lowerDot(DotOp op);
  /// The dot on warpgroup MMA (LowerWgmma.cpp); nullopt, with the reason in
  /// `why`, when its shape or operands do not fit.
  std::optional<Regs> lowerDotWgmma(DotOp op, std::string &why);
  /// Iterations ahead that `forOp`'s prefetched loads are fetched: S-1, or
  /// S-2 when its wgmma accumulations may stay in flight (deferWaits).
  int prefetchDistance(mlir::scf::ForOp forOp);
  /// wgmma.wait_group for `v` if it is in flight; for all.
  void waitFor(mlir::Value v);
  void waitForAll();
  void note(mlir::Operation *op, const std::string &what);
  /// Layout conversion to a 16-bit mma operand through XOR-swizzled shared
  /// memory and ldmatrix; false when the source does not fit that path.
  bool convertToDotOperand(const Regs &in, const Layout &to, mlir::Type elem,
                           llvm::SmallVectorImpl<mlir::Value> &out);
  /// Writes registers (2-D, 16- or 32-bit) to a swizzled tile at `base` (an
  /// offset into dynamic shared memory); nullopt when the layout does not
  /// fit.
  std::optional<SmemTile> stage(const Regs &in, mlir::Type elem,
                                mlir::Value base);
  /// The swizzled tile a 2-D layout of `elemBytes` elements is staged into
  /// (base left unset).
  std::optional<SmemTile> tileGeometry(const Layout &from,
                                       int64_t elemBytes = 2);
  /// Whether a dot-only load inside `loop` can be fetched one iteration ahead
  /// with cp.async; `slice` gets the body ops its operands depend on.
  bool canPrefetch(LoadOp ld, llvm::SmallVectorImpl<mlir::Operation *> *slice);
  /// Whether the operands of a load in a loop's body are loop-invariant or
  /// pure scalar arithmetic of the induction variable (so that they can be
  /// evaluated for another iteration); `slice` gets those body ops in order.
  bool iterationSlice(LoadOp ld,
                      llvm::SmallVectorImpl<mlir::Operation *> *slice);
  /// A small load to registers in a loop's body (a row of statistics, a
  /// bias) that each iteration issues for the next one, so that its latency
  /// hides behind the iteration's work.
  bool loadsAhead(LoadOp ld);
  /// cp.async of a load's block into a tile, 16 bytes per copy, zero-filled
  /// outside the tensor.
  void issueAsyncCopy(LoadOp ld, const SmemTile &t, mlir::Value guard = {});
  /// Whether the kiln IR pointer `ptr` moves with the loop's induction
  /// variable `iv` (an outer index taken at it, such as T[r]): at an
  /// iteration the loop does not run it may point outside its tensor, where
  /// the block's bounds checks cannot help (their out-of-range elements read
  /// the block's first address).
  bool pointerMovesWith(mlir::Value ptr, mlir::Value iv);
  /// lowerLoad under the uniform `cond`, padding where it is false.
  Regs lowerLoadIf(LoadOp ld, mlir::Value cond);
  /// Byte offset of element (row, col) of a tile in dynamic shared memory.
  mlir::Value tileOffset(const SmemTile &t, mlir::Value row, mlir::Value col);
  /// Pointers into tile `t` for every `step`-th register of layout `l`:
  /// the thread's own offset once, then a constant row offset and a constant
  /// chunk XOR per register when `l`'s register and thread coordinates use
  /// disjoint bits (the strength-reduced form LLVM would otherwise have to
  /// find); one full tileOffset per register otherwise.
  llvm::SmallVector<mlir::Value> tilePtrs(const SmemTile &t, const Layout &l,
                                          int64_t step, bool reduce = true);
  /// ldmatrix of the mma operand fragments of k-slice `ki` (all m or n tiles
  /// of this warp) into `out`, indexed as registers of `to`.
  void loadFragments(const SmemTile &t, const Layout &to, int64_t ki,
                     llvm::SmallVectorImpl<mlir::Value> &out);
  /// Every k-slice of `t` by loadFragments, unpacked into one `elem` value
  /// per register of `to`.
  llvm::SmallVector<mlir::Value>
  readFragments(const SmemTile &t, const Layout &to, mlir::Type elem);
  /// Finds the staged operands (their bytes in stagedOperands, until
  /// planSharedMemory places them).
  void planStagedOperands();
  /// Places those copies where they fit (after the TMA staging tiles).
  void planStagedCopies();
  static int64_t stagedBytes(mlir::RankedTensorType type);
  /// Whether `loop` is an scf.for whose blocks come from the producer
  /// warpgroup's ring (its iterations wait for full stages and release them).
  bool fedByRing(mlir::Operation *loop);
  /// `a`'s fragments in layout `la`, read from its shared-memory tile
  /// before the current loop; nullopt when the tile is not loop-invariant.
  std::optional<llvm::SmallVector<mlir::Value>>
  invariantFragments(mlir::Value a, const SmemTile &t, const Layout &la);
  /// Stages a conversion's source for the dots that read it (their
  /// previous reads waited for, every warp past them).
  void lowerStagedOperand(ConvertLayoutOp op);
  /// Elements of an atomic's value per red instruction.
  int64_t atomicWidth(AtomicRMWOp op);
  /// Elements per st.global of a store through registers.
  int64_t storeWidth(StoreOp op);
  // Shared memory (SharedMemoryPlan.cpp).
  /// Places every buffer of the kernel but the scratch area, by liveness
  /// over the body's top-level ops.
  void planSharedMemory();
  /// After the body is lowered: places the scratch area (conversions,
  /// reductions; smemBytes) beside the buffers live where it is used, says
  /// where everything went in the report; returns the kernel's bytes.
  int64_t placeScratch();
  /// The scratch area's offset, as a constant placeScratch fills in.
  mlir::Value scratchBaseValue();
  /// A buffer live from top-level op `first` to `last` (throughout when
  /// CTAs are persistent).
  SharedBuffer sharedBuffer(std::string what, int64_t bytes, int first,
                            int last, bool computeOnly = false) const;
  /// The index of `op`'s top-level ancestor in the body.
  int topIndexOf(mlir::Operation *op) const;
  /// "file:line" of `op`'s source.
  std::string lineOf(mlir::Operation *op) const;
  // TMA (LowerTma.cpp).
  /// Whether `ld` is a 2-D block of a tensor argument TMA can copy into its
  /// wgmma tile; `why` says why not.
  std::optional<TmaLoad> matchTma(LoadOp ld, std::string &why);
  /// The same for the block of a load or a store: its pointer, offsets,
  /// shape and strides, and the tile in registers.
  std::optional<TmaLoad> matchTmaBlock(mlir::Value ptr,
                                       mlir::ValueRange offsets,
                                       mlir::ValueRange shape,
                                       mlir::ValueRange strides,
                                       mlir::Value tile, std::string &why);
  /// A matched block's TMA coordinates, innermost dimension first.
  llvm::SmallVector<mlir::Value> tmaCoords(const TmaLoad &t,
                                           mlir::ValueRange offsets);
  /// The index of `info`'s tensor map among the kernel's (added if new).
  int tensorMapFor(const TensorMapInfo &info);
  /// Picks the loops whose pipelined loads all go through TMA and places
  /// their mbarriers (numStages each) at `top`, advancing it.
  void planTma(int64_t &top);
  /// mbarrier.init of every TMA loop's barriers by thread 0, fenced, then a
  /// barrier.
  void initMbarriers();
  /// The mbarrier of stage `slot` of TMA loop `loop`.
  mlir::Value mbarrier(mlir::Operation *loop, mlir::Value slot);
  /// Arms `mbar` with the bytes of `loads` and issues their copies into the
  /// buffers at `bases`, from thread 0 and where `pred` holds.
  void issueTma(llvm::ArrayRef<LoadOp> loads, llvm::ArrayRef<mlir::Value> bases,
                mlir::Value mbar, mlir::Value pred);
  /// Under a producer warpgroup, dot-only loads outside loops that TMA can
  /// copy: the producer fetches them once per tile into their region, on a
  /// full and an empty mbarrier of their own (at residentMbarrier), and the
  /// consumers release them after `releaseAfter`, the top-level op that
  /// last reads them.
  void planResidentTma(int64_t &top);
  /// Whether TMA copies `ld` (matchTma); if so its tensor map and copy are
  /// recorded (tmaLoads), else the reason (tmaFallback).
  bool claimTma(LoadOp ld);
  /// Without a producer warpgroup or persistent CTAs, dot-only loads
  /// outside loops that TMA can copy: thread 0 issues each where it stands,
  /// on an mbarrier of its own (at oneShotMbarrier), and every thread waits
  /// only before the load's first reader, after a pipelined loop's prologue,
  /// so that its latency overlaps the loop's first copies.
  void planOneShotTma(int64_t &top);
  /// Thread 0 issues one-shot load `ld`; it is pending until waited for.
  void issueOneShot(LoadOp ld);
  /// Waits for the pending one-shot loads that `op` or an op inside it reads
  /// (`all`: every pending one).
  void waitOneShotReadBy(mlir::Operation *op, bool all = false);
  /// Producer: waits for the consumers to release `ld`'s buffer (the
  /// previous tile's) and fetches it.
  void issueResident(LoadOp ld);
  /// The full (or, `released`, the empty) mbarrier of resident load `v`.
  mlir::Value residentMbarrierOf(mlir::Value v, bool released = false);
  /// Consumers: the mbarrier phase of this tile's resident loads.
  mlir::Value residentPhase();
  /// Waits until `mbar` has completed the phase of parity `phase`.
  void waitMbarrier(mlir::Value mbar, mlir::Value phase);
  /// The phase before `phase`: what a producer waits for on a "released"
  /// mbarrier (a fresh barrier's previous phase counts as complete).
  mlir::Value previousPhase(mlir::Value phase);
  /// The "released" mbarrier of stage `slot` (warp specialization).
  mlir::Value emptyMbarrier(mlir::Operation *loop, mlir::Value slot);
  /// The thread that issues TMA copies: thread 0, or the producer
  /// warpgroup's first thread.
  mlir::Value isTmaLeader();
  // TMA stores (LowerTmaStore.cpp).
  /// Picks the stores TMA can write and places their staging tiles (live
  /// from the store on) while they fit in `sharedLimit` bytes.
  void planTmaStores();
  void lowerTmaStore(mlir::Operation *op, const TmaStore &s);
  /// lowerTmaStore where the block's offsets are >= 0, else `fallback`
  /// (st.global or atomics from registers): the bulk copy faults on a box at
  /// a negative coordinate. Unguarded where the offsets cannot be negative.
  void lowerTmaStoreOrFallback(mlir::Operation *op, const TmaStore &s,
                               llvm::function_ref<void()> fallback);
  /// The report's line for each load: its path (TMA, cp.async, registers),
  /// how far ahead, and the bounds checks it takes.
  void noteLoads();
  /// The report line of each store.
  void noteStores();
  /// Before the kernel returns: every bulk store has read its staging tile.
  void finishTmaStores();
  // Warp specialization (LowerWarpRoles.cpp).
  /// Whether the schedule's producer warpgroup can be had; says in the
  /// report.
  void planWarpRoles();
  /// The function body split between the producer and the compute warps.
  void lowerSpecialized(mlir::Block &body);
  void lowerProducerLoop(mlir::scf::ForOp forOp);
  // Ping-pong (LowerWarpRoles.cpp): the two compute warpgroups take turns
  // issuing the first dot of each consumer loop's body.
  /// Whether the schedule's ping-pong can be had; says in the report.
  void planPingpong();
  /// Waits for this warpgroup's turn (named barrier 2 + warpgroup).
  void takeTurn();
  /// Hands the turn to the other warpgroup (arrives on its barrier).
  void passTurn();
  // Warpgroups with no rows to compute (SkipDeadRows.cpp).
  void planRowSkips();
  /// Whether this warpgroup computes `forOp`'s iterations; null where every
  /// warpgroup does.
  mlir::Value rowsLive(mlir::scf::ForOp forOp);
  /// Where a warpgroup may skip `forOp`: under `pipeline` (a skipping
  /// warpgroup) the iterations' waits, barriers, fetches, ping-pong turns
  /// and releases, from the stage and phase in `inits` after `carried`
  /// (replaced by where they end), `fetch(iv, slot)` being iteration iv's
  /// fetch ahead without a producer (lowerFor's); `bound`, the loop's upper
  /// bound, is its lower one there.
  struct DeadRowSkip {
    mlir::scf::IfOp pipeline; ///< null where the loop prefetches nothing
    mlir::arith::SelectOp bound;
  };
  std::optional<DeadRowSkip>
  skipDeadRows(mlir::scf::ForOp forOp,
               llvm::SmallVectorImpl<mlir::Value> &inits, size_t carried,
               bool prefetches, bool viaTma, bool consumer, int dist,
               llvm::function_ref<void(mlir::Value, mlir::Value)> fetch);
  /// After the loop's body: the report's line; where an op in the body
  /// lowered to a barrier (`opBarriers`), every warpgroup runs the loop.
  void noteDeadRowSkip(mlir::scf::ForOp forOp, const DeadRowSkip &skip,
                       int opBarriers);
  // Persistent scheduling (LowerPersistent.cpp).
  /// Whether the schedule's persistent CTAs (and dynamic tiles) can be had;
  /// says in the report. Takes the tile ring's shared memory from `top`.
  void planPersistent(int64_t &top);
  FreshValues freshenForTile(TileRole role);
  void restore(const FreshValues &saved);
  /// Emits `body` once per tile of the grid (persistent) or once.
  void forEachTile(llvm::function_ref<void()> body,
                   TileRole role = TileRole::All);
  /// After a tile's body: with the tile gate, its bulk stores have read
  /// their staging tiles and the compute warps say the tile is done.
  void endTile(TileRole role);
  /// Producer, before a tile's first copy: the previous tile is done.
  void waitForPreviousTile();
  /// Dynamic tiles: the loop over tiles as they are handed out.
  void forEachDynamicTile(llvm::function_ref<void()> body, TileRole role);
  /// Dynamic tiles: the tile id ring's mbarriers (full; `released`: empty)
  /// and slot for hand-out k.
  mlir::Value tileRingMbarrier(mlir::Value k, bool released);
  mlir::Value tileRingSlot(mlir::Value k);
  /// Program id `axis` of the current tile.
  mlir::Value programId(uint32_t axis);
  /// Emits gridExtentValues and persistentTiles at the insertion point.
  void evaluatePersistentGrid();
  /// `e` as an i32 value from the kernel's arguments.
  mlir::Value evaluateExtent(const GridExtent &e);
  /// Emits foldedProgramY, foldedGridY and the early return where the grid
  /// calls for them.
  void foldRuntimeGridY();
  mlir::Value sharedAt(mlir::Value byteOffset); ///< no scratch offset
  /// Offset of stage `slot`'s buffer of pipelined load `ld`.
  mlir::Value stageBuffer(LoadOp ld, mlir::Value slot);
  /// The next stage: slot + 1 mod numStages; `phase` (when given) flips as
  /// the slots wrap around.
  void nextStage(mlir::Value &slot, mlir::Value *phase);
  mlir::Value isThreadZero();

  Regs lowerReduce(ReduceOp op);
  Regs lowerBroadcast(mlir::Value src, const Layout &dst);

private:
  void lowerBlock(mlir::Block &block);
  void lowerOp(mlir::Operation *op);
  void lowerFor(mlir::scf::ForOp op);
  Regs lowerElementwise(mlir::Operation *op, const Layout &l);
  Regs lowerConvertLayout(ConvertLayoutOp op, const Layout &to);
  bool isUniform(mlir::Operation *op) const;
  mlir::Value scalarOp(mlir::Operation *op, mlir::ValueRange operands,
                       mlir::Type resultElem);
  Regs materialize(mlir::Value v);

  mlir::func::FuncOp src;
  llvm::DenseMap<mlir::Value, mlir::Value> scalars;
  llvm::DenseMap<mlir::Value, Regs> tiles;
};

} // namespace kiln::gpu

#endif // KILN_LIB_CONVERSION_LOWERING_H
