//===- LowererState.h - the lowering's state --------------------*- C++ -*-===//
//
// Internal to compiler/lib/Conversion: the data a Lowerer keeps, in one
// struct per concern; Lowerer (Lowering.h) derives from them all, so its
// methods use these members by name.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_LIB_CONVERSION_LOWERERSTATE_H
#define KILN_LIB_CONVERSION_LOWERERSTATE_H

#include "LoweredTile.h"
#include "SharedMemoryPlan.h"

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/TensorArgs.h"
#include "kiln/runtime/Params.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

#include <string>
#include <utility>
#include <vector>

namespace kiln::gpu {

/// What the whole kernel's code depends on: the schedule's switches, the
/// thread's lane and warp, the dots in flight and the lowering report.
struct CodeState {
  bool reloadThreadIds = false; ///< see GpuTarget::reloadThreadIds
  /// cp.async destinations: a full offset per register (the kernel's
  /// kiln.copy_addresses_per_register), else base plus constants.
  bool copyAddressesPerRegister = false;
  /// Selects on index-range masks under a per-thread check
  /// (kiln.skip_passing_masks, LowerMaskedSelect.cpp).
  bool skipPassingMasks = false;
  mlir::Value lane, warp; ///< i32
  mlir::Value smemBase;   ///< !llvm.ptr<3>
  int64_t smemBytes = 0;
  int genericConversions = 0; ///< layout changes through shared memory
  /// The dots run on wgmma (the kernel's schedule asks for it and the target
  /// is sm_90a): operand tiles take the 128-byte swizzle layout and data
  /// written to shared memory is fenced for the async proxy.
  bool wgmma = false;
  /// What each dot and each load became, with the user's source line: the
  /// lowering report (`kiln report`).
  std::vector<std::string> report;
  /// wgmma results (tile values, oldest first; one commit group each) whose
  /// MMAs may still run; deferWaits: a dot may leave its group in flight
  /// (inside a pipelined loop, LowerFunction.cpp says when that is safe).
  llvm::SmallVector<mlir::Value> inFlight;
  bool deferWaits = false;
};

/// Loads ahead, prefetch buffers, staged operands and the shared-memory plan
/// (LowerLoop.cpp, LowerDot.cpp, SharedMemoryPlan.cpp).
struct SharedMemoryState {
  /// Loads whose registers the loop already holds (loaded an iteration
  /// ahead): lowerOp skips them.
  llvm::DenseSet<mlir::Value> loadedAhead;
  /// Induction variables of the kiln IR being lowered at an iteration the
  /// loop may not run (a prefetch's, the prologue's): accesses at them keep
  /// their bounds checks (blockWithin).
  llvm::DenseSet<mlir::Value> ivsOutOfRange;
  /// Set while a loop's prologue loads the first iteration's registers
  /// ahead: they are read only if the loop runs, so a block that lies within
  /// its tensor at every iteration that runs needs no padding (its
  /// addresses stay clamped to ones that exist).
  bool loadingFirstAhead = false;
  /// Prefetched loads: numStages buffers of `smemBufferBytes`, the first at
  /// smemRegion, one every stageStride bytes (stage-major: see run).
  llvm::DenseMap<mlir::Value, int64_t> smemBufferBytes;
  int64_t stageStride = 0;
  llvm::DenseMap<mlir::Value, mlir::Value> prefetchedBase;
  /// Loads staged in shared memory: their tiles, and the dot-only loads
  /// that go there (findSharedOperands).
  llvm::DenseMap<mlir::Value, SmemTile> smemTiles;
  llvm::DenseSet<mlir::Value> sharedOperands;
  llvm::DenseMap<mlir::Value, int64_t> smemRegion; ///< offsets of staged loads
  /// Under wgmma: conversions of a register tile into a dot operand layout
  /// that would move data between threads (a transposed tile, a tile other
  /// warps need): the tile is staged in its own shared-memory region
  /// (offset here) and the dot reads it through a descriptor.
  llvm::MapVector<mlir::Value, int64_t> stagedOperands;
  /// Staged operands in a loop the producer's ring feeds, with a copy per
  /// stage: the offset of copies 1..numStages-1 (copy 0 at stagedOperands).
  llvm::DenseMap<mlir::Value, int64_t> stagedCopies;
  /// Dots in a loop read a loop-invariant A operand from shared memory into
  /// registers once, before the loop (wgmma's register form): see
  /// KernelBuilder::setInvariantAInRegisters (kiln.invariant_a_in_registers).
  bool invariantAInRegisters = false;
  /// The loop being lowered (its new scf.for) and the thread's lane and warp
  /// outside it; A fragments read before it, per operand.
  mlir::Operation *currentLoop = nullptr;
  mlir::Value outerLane, outerWarp;
  llvm::DenseMap<mlir::Value, llvm::SmallVector<mlir::Value>> hoistedA;
  /// Inside such a loop's body: this iteration's stage of the ring.
  mlir::Value ringSlotHere;
  /// sm_90's vector reductions (red.global.add.v2/v4.f32) are available.
  bool vectorAtomics = false;
  /// The shared-memory plan (SharedMemoryPlan.cpp) over the body's
  /// top-level ops, and the scratch area's uses.
  SharedPlan shared;
  llvm::DenseMap<mlir::Operation *, int> topIndex;
  std::vector<mlir::Operation *> bodyOps;
  int currentTop = -1;     ///< the top-level op being lowered
  int64_t scratchBase = 0; ///< scratch area for conversions and reductions
  std::vector<int> scratchUses;
  std::vector<mlir::arith::ConstantOp> scratchBaseOps;
};

/// TMA loads and stores, their mbarriers and tensor maps, and the limits the
/// shared-memory plan was made under (LowerTma.cpp, LowerTmaStore.cpp).
struct TmaState {
  bool tma = false; ///< the schedule asks for it (kiln.tma) under wgmma
  /// A pipelined load that TMA fetches: its tensor map (index into
  /// tensorMaps), the tensor dimension its rows run along, the index into
  /// each other dimension but the last (null: 0), and the shared-memory
  /// tile's panels.
  struct TmaLoad {
    TensorMapInfo info;
    int map = -1, rowDim = -1;
    llvm::SmallVector<mlir::Value> index;
    int64_t rows = 0, panels = 0, panelBytes = 0, panelCols = 64;
  };
  /// Resident loads (planResidentTma): their mbarriers' offsets, and the
  /// top-level op after which the consumers release each.
  llvm::MapVector<mlir::Value, int64_t> residentMbarrier;
  llvm::DenseMap<mlir::Operation *, llvm::SmallVector<mlir::Value>>
      releaseAfter;
  /// One-shot loads (planOneShotTma): their mbarriers' offsets.
  llvm::MapVector<mlir::Value, int64_t> oneShotMbarrier;
  /// Issued one-shot loads not yet waited for, each with the ops that read
  /// it (through layout conversions and transposes, which are views).
  llvm::MapVector<mlir::Value, llvm::SmallVector<mlir::Operation *>>
      pendingOneShot;
  /// A store that TMA writes: the compute warps stage the tile in a
  /// swizzled shared-memory region of its own, then one thread per group of
  /// warps (a warpgroup where each holds a slab of rows; else all of them)
  /// copies its rows out with cp.async.bulk.tensor.
  struct TmaStore {
    TmaLoad block;
    int64_t region = 0;     ///< staging tile's offset in shared memory
    int64_t groupWarps = 0; ///< warps per group (one bulk copy each)
    int64_t groupRows = 0;  ///< rows per group's slab
    /// Non-empty: the staging tile is that earlier write's (its line).
    std::string sharesTileOf;
  };
  /// Shared memory a CTA may take; > 0 in retriedBytes: the first lowering
  /// took that many with TMA stores, over the limit.
  int64_t sharedLimit = 227 * 1024, retriedBytes = 0;
  /// Persistent CTAs keep every buffer live across tiles (the producer
  /// fetches the next tile's blocks during this tile's epilogue). > 0: a
  /// first lowering that did so needed that many bytes (over the limit, or a
  /// TMA staging tile crowded out): the producer waits for each tile's end
  /// (the tile gate) and buffers are placed by liveness within a tile.
  int64_t gatedFrom = 0;
  /// Without the gate: the bytes a crowded-out TMA staging tile needed.
  int64_t crowdedPeak = 0;
  /// Persistent CTAs with a producer warpgroup: the buffers only the compute
  /// warps write (staged operands and their copies, TMA staging tiles) are
  /// placed by liveness within a tile, and the compute warps meet at each
  /// tile's end (their bulk copies done reading): the producer's buffers
  /// stay live across tiles. Set for a second lowering where the first
  /// left a staged operand without its copies (copiesCrowded).
  bool tileLocalCompute = false, copiesCrowded = false;
  /// The tile gate's mbarrier (every compute thread arrives at a tile's end).
  int64_t tileGate = -1;
  /// The stores TMA writes, and why each other store does not.
  llvm::DenseMap<mlir::Operation *, TmaStore> tmaStores;
  llvm::DenseMap<mlir::Operation *, std::string> tmaStoreFallback;
  /// The loads TMA copies (claimTma), the mbarriers of each TMA loop, and
  /// the kernel's tensor maps.
  llvm::DenseMap<mlir::Value, TmaLoad> tmaLoads;
  llvm::DenseMap<mlir::Value, std::string> tmaFallback; ///< why not TMA
  llvm::MapVector<mlir::Operation *, int64_t> mbarrierBase;
  std::vector<TensorMapInfo> tensorMaps;
  llvm::SmallVector<mlir::Value> tensorMapArgs; ///< of the lowered function
};

/// Counters the kernel arrives at, and programmatic dependent launch
/// (LowerArrivals.cpp).
struct ArrivalState {
  /// Arrivals whose count is unused, on persistent CTAs, are made one
  /// program late (LowerArrivals.cpp): the CTA's pending counter address
  /// and each thread's bulk groups committed since the last arrival, in
  /// local variables.
  bool deferArrivals = false;
  mlir::Value pendingArrival, bulkGroupsSince;
  /// With a producer warpgroup, the deferred arrivals are made by one of its
  /// idle threads: the compute warps hand each program's counter address
  /// over through a two-slot ring in shared memory (8-byte addresses, then
  /// two full mbarriers every compute thread arrives on, then two empty ones
  /// the arriving thread arrives on), so that no compute warp waits.
  int64_t arrivalRing = -1;
  mlir::Value arrivalMessages; ///< messages sent so far (a local)
  /// sm_90: griddepcontrol (programmatic dependent launch) and the async
  /// proxy's fences are available.
  bool gridDependencyControl = false;
  /// kiln.overlap_previous on sm_90: the kernel ends with griddepcontrol.wait.
  bool overlapPrevious = false;
};

/// The producer warpgroup, ping-pong and warpgroups that skip dead rows
/// (LowerWarpRoles.cpp, SkipDeadRows.cpp).
struct WarpRoleState {
  int producerWarps = 0; ///< 4 when a producer warpgroup issues the copies
  int producerRegisters = 0, consumerRegisters = 0;
  bool consumerBarriers = false; ///< barrier() syncs the compute warps only
  /// Set while lowering a loop with a dead-row skip and its skeleton: warps
  /// meet at barriers that are different instructions (barrier() emits
  /// barrier.sync without .aligned).
  bool divergentBarriers = false;
  /// Under a producer warpgroup: the ring's next stage and its mbarrier
  /// phase, where the last loop (on this side) left them.
  mlir::Value ringSlot, ringPhase;
  /// The dots each compute warpgroup issues on its turn (ping-pong).
  llvm::DenseSet<mlir::Operation *> pingpongDots;
  /// A top-level loop whose results reach only row-local ops and stores,
  /// split by rows over the compute warpgroups (`rows` each): a warpgroup
  /// whose rows every one of `stores` drops runs only the loop's waits,
  /// barriers and releases.
  struct RowSkip {
    int64_t rows = 0;
    llvm::SmallVector<StoreOp> stores;
  };
  llvm::DenseMap<mlir::Operation *, RowSkip> rowSkips;
  /// barrier() calls so far (one in a loop's ops rules its skip out).
  int barrierCount = 0;
};

/// Persistent CTAs, dynamic tiles and the grid's program ids
/// (LowerPersistent.cpp).
struct PersistentState {
  /// Who runs a tile loop: under dynamic tiles the producer takes the tiles
  /// and the compute warps receive them.
  enum class TileRole { All, Producer, Consumer };
  /// kiln.fresh_program_values (KernelBuilder::setFreshProgramValues).
  bool freshProgramValues = false;
  /// What a persistent tile's body replaced: the lane and warp, and the
  /// kernel arguments' values (freshenForTile, undone by restore).
  struct FreshValues {
    mlir::Value lane, warp;
    llvm::SmallVector<std::pair<mlir::Value, mlir::Value>> args;
  };
  bool dynamicTiles = false;
  int64_t tileRing = -1; ///< shared offset: 2 ids, then 2 full, 2 empty
  /// Dynamic tiles: the kernel's last parameter, the counter's address.
  mlir::Value tileCounterArg;
  /// The kernel's grid when persistent (an extent evaluated from the
  /// arguments where it is not constant), else empty.
  llvm::SmallVector<GridExtent, 3> persistentGrid;
  /// Persistent: the grid's extents and programs as i32 values, computed at
  /// the kernel's entry (constants for a constant grid).
  llvm::SmallVector<mlir::Value, 3> gridExtentValues;
  mlir::Value persistentTiles;
  /// Not persistent, y run-time and z 1: program id y, blockIdx.y +
  /// gridDim.y * blockIdx.z, and the grid's y, so that the launcher may
  /// split a y past the device's 65535 across y and z (LaunchSpec::grid);
  /// programs past y return at the entry. Null otherwise.
  mlir::Value foldedProgramY, foldedGridY;
  mlir::Value tile;      ///< i32: the tile being computed (persistent)
  mlir::Value tileCount; ///< i32: tiles this CTA computed before this one
};

} // namespace kiln::gpu

#endif // KILN_LIB_CONVERSION_LOWERERSTATE_H
