//===- KernelBuilder.h - the DSL's kernels, arguments, options --*- C++ -*-===//
//
// KernelBuilder: one kernel's name, grid, tensor and integer arguments,
// schedule options, and the finished Kernel. Part of Dsl.h.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DSL_KERNELBUILDER_H
#define KILN_DSL_KERNELBUILDER_H

#include "kiln/Compiler/Kernel.h"
#include "kiln/dsl/Memory.h"

#include <array>
#include <memory>

namespace kiln::dsl {

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

Index programId(int axis, Loc loc = Loc::current());
Index numPrograms(int axis, Loc loc = Loc::current());

/// A tensor argument's dimensions: constants ({4, 128}, or a Shape) and
/// run-time integer arguments ({B, H, N, 128}).
struct Dims {
  Dims(std::initializer_list<Index> d) : dims(d) {}
  Dims(std::vector<Index> d) : dims(std::move(d)) {}
  Dims(const Shape &shape) {
    for (int64_t d : shape)
      dims.emplace_back(d);
  }
  std::vector<Index> dims;
};

/// Builds one kernel. While it is alive, the free functions above add ops to
/// it (one builder per thread at a time).
class KernelBuilder {
public:
  KernelBuilder(const std::string &name, std::array<int64_t, 3> grid,
                Loc loc = Loc::current());
  KernelBuilder(const std::string &name, std::initializer_list<int64_t> grid,
                Loc loc = Loc::current());
  /// A kernel whose grid setGrid gives once its arguments exist.
  explicit KernelBuilder(const std::string &name, Loc loc = Loc::current());
  ~KernelBuilder();
  KernelBuilder(const KernelBuilder &) = delete;
  KernelBuilder &operator=(const KernelBuilder &) = delete;

  /// A tensor argument: a pointer parameter `name` and a stride parameter per
  /// dimension (`name_stride0`, ...). Each dimension is compiled in or a
  /// run-time integer argument (scalarArg's value: {B, H, N, 128}), which a
  /// launch binds from the tensor's shape (Kernel::bind), so that one
  /// compile serves every size.
  TensorView tensorArg(const std::string &name, DType dtype, Dims dims,
                       Loc loc = Loc::current());
  /// A run-time integer argument (an i32 parameter `name`): an Index usable
  /// wherever one is (offsets, loop bounds, masks, comparisons, tensor
  /// dimensions, the grid), bound by name at each launch (Kernel::bind's
  /// `scalars`, or from a tensor's shape), so that one compile serves every
  /// value.
  Index scalarArg(const std::string &name, Loc loc = Loc::current());
  /// The same for values that are multiples of `multipleOf` (what the
  /// kernel was built for, e.g. whole key blocks): the compiler may assume
  /// it, and Kernel::bind and the launcher refuse other values.
  Index scalarArg(const std::string &name, int64_t multipleOf,
                  Loc loc = Loc::current());
  /// The launch grid: per axis a constant or a product of constants,
  /// run-time integer arguments and cdiv(argument, constant)
  /// ({cdiv(N, 128), B * H}), evaluated on the host at each launch. Given
  /// here or to the constructor, before numPrograms is read.
  void setGrid(std::vector<Index> grid, Loc loc = Loc::current());
  /// Compiles `tensor`'s accesses for any alignment (element accesses)
  /// whatever a launch's tensors, so that one variant serves aligned and
  /// unaligned ones (Triton's do_not_specialize): for a tensor accessed too
  /// little for vectors to matter (attention's LSE, one fp32 per row),
  /// whose alignment would otherwise split compiles by N % 4.
  void keepUnspecialised(const TensorView &tensor, Loc loc = Loc::current());
  /// The kernel requires `tensor`'s last dimension to be contiguous (stride
  /// 1; Kernel::bind and the launcher refuse others): its element accesses
  /// then need no stride multiply, whatever its specialisation.
  void requireContiguous(const TensorView &tensor, Loc loc = Loc::current());
  /// Kernel::bind refuses values of run-time integer `a` below run-time
  /// integer `b` (say, a workspace's row length and the rows it serves).
  void requireAtLeast(Index a, Index b, Loc loc = Loc::current());
  /// Kernel::bind refuses values of run-time integer `a` other than
  /// `factor` times run-time integer `b` (say, query heads and the K/V
  /// heads each group of `factor` of them reads).
  void requireProduct(Index a, int64_t factor, Index b,
                      Loc loc = Loc::current());
  /// Warps per program on the GPU (a power of two; default 4).
  void setWarps(int warps, Loc loc = Loc::current());
  /// Software-pipeline depth of the loads in loops (>= 2; default 2).
  void setStages(int stages, Loc loc = Loc::current());
  /// Codegen hint: re-read thread ids inside loops
  /// (GpuTarget::reloadThreadIds).
  void setReloadThreadIds(bool reload);
  /// Codegen hint: shared-memory destinations of asynchronous copies as one
  /// full swizzled offset per register rather than the thread's base offset
  /// plus per-register constants (the default). Which allocates better
  /// depends on the kernel's register pressure; it is measured, not derived.
  void setCopyAddressesPerRegister(bool perRegister);
  /// Codegen: a select whose condition compares index ranges (a bounds or
  /// causal mask) first checks, per thread, whether every element it holds
  /// passes, and then keeps the true operand without selecting. It pays in
  /// a loop that masks every step of which few need it; elsewhere the branch
  /// costs a little (measured), so it is the kernel's choice.
  void setSkipPassingMasks(bool skip);
  /// Codegen (on by default): where a tile's rows are split over the compute
  /// warpgroups and a warpgroup's rows all fall outside every store of a
  /// loop's results, that warpgroup runs only the loop's pipeline (waits,
  /// releases), not its work. Off: every warpgroup computes every loop.
  void setSkipDeadRows(bool skip);
  /// A dot in a loop whose A operand is a loop-invariant tile in shared
  /// memory reads it into registers once, before the loop, and takes wgmma's
  /// register form: the loop's MMAs then read only B from shared memory
  /// (half the bytes at N = 64), for registers the kernel must have spare
  /// (kiln.invariant_a_in_registers).
  void setInvariantAInRegisters(bool inRegisters);
  /// Codegen hint: ptxas keeps each thread's registers low enough for
  /// `blocks` CTAs per SM (PTX .minnctapersm; at 8 warps and 2 blocks, 128
  /// registers), where a kernel meant to run that many at once would
  /// otherwise take a few registers more and run half as many.
  void setMinBlocksPerSM(int blocks, Loc loc = Loc::current());
  /// Schedule: the dots on Hopper's warpgroup MMA (wgmma, sm_90a; on other
  /// targets they stay on mma.sync and the lowering report says so) rather
  /// than mma.sync. It wants warps in groups of 4, each group over 64 rows.
  void setWgmma(bool wgmma);
  /// Schedule: under wgmma, loads pipelined in loops go through the Tensor
  /// Memory Accelerator (cp.async.bulk.tensor with tensor maps, completion on
  /// mbarriers) rather than cp.async; a load that does not fit says why in
  /// the lowering report.
  void setTma(bool tma);
  /// Schedule: warp roles. With TMA, an extra producer warpgroup issues the
  /// copies while the kernel's warps only compute (setmaxnreg moves registers
  /// to them); the lowering report says when it cannot.
  void setWarpSpecialize(bool specialize);
  /// With a producer warpgroup and two compute warpgroups: the compute
  /// warpgroups take turns issuing the first dot of each pipelined loop's
  /// body (named barriers), so that one's tensor-core work overlaps the
  /// other's elementwise work instead of both contending at once.
  void setPingpong(bool pingpong);
  /// In loops whose last dot accumulates into a carried tile: run that dot
  /// one iteration behind, issued after the next iteration's first dot, so
  /// that the elementwise work between the two overlaps it on the tensor
  /// cores (kiln-overlap-dots).
  void setOverlapDots(bool overlap);
  /// There, a loop with no loop before it that can be its first iteration
  /// gets one: its first iteration peeled, so that no iteration issues the
  /// last dot of a zero tile (kiln-overlap-dots).
  void setPeelFirstIteration(bool peel);
  /// Persistent CTAs: the runtime launches only as many CTAs as the GPU
  /// runs at once and each loops over the grid's programs (x fastest), so
  /// that a producer warpgroup fetches the next program's blocks while this
  /// one finishes. Program ids and num_programs read as without it.
  void setPersistent(bool persistent);
  /// Persistent CTAs with a producer warpgroup: programs are handed out in
  /// grid order as CTAs become free (a global atomic counter; the producer
  /// takes the next one and passes it to the compute warps through shared
  /// memory) instead of in fixed rounds. Launches of one loaded kernel must
  /// then not overlap (the counter is the module's).
  void setDynamicTiles(bool dynamic);
  /// Persistent CTAs: each program's body reads the thread id and the
  /// kernel's arguments afresh (and again after each of its loops), so that
  /// its first loads' and last stores' address arithmetic is not hoisted out
  /// of the loop over programs and held across the body's loops. Fewer
  /// registers live, more arithmetic per program.
  void setFreshProgramValues(bool fresh);
  /// The kernel may start while the previous launch on its stream is still
  /// running (programmatic dependent launch, sm_90): its programs take free
  /// SMs as that launch's CTAs finish. Whatever it reads of that launch's
  /// writes it must wait for (waitCount on counters that launch arrives
  /// at); it must not write what that launch reads. The launch after it
  /// still starts only once both are done. Elsewhere (sm_80, the CPU) an
  /// ordinary launch.
  void overlapPreviousLaunch(bool overlap = true);
  /// Under TMA: 16-bit 2-D block stores to tensor arguments are staged in
  /// shared memory and written by TMA bulk copies where the staging tile
  /// fits (the lowering report says where it did not).
  void setTmaStores(bool tmaStores);
  /// Under TMA, without a producer warpgroup or persistent CTAs: dot
  /// operands loaded outside loops are copied by TMA once, issued where the
  /// load stands and waited for only before their first reader (after a
  /// pipelined loop's first copies), rather than through registers first.
  void setOneShotLoads(bool oneShot);
  /// Ends the kernel, verifies it and returns it.
  Kernel finish(Loc loc = Loc::current());

  struct State;

private:
  std::unique_ptr<State> state_;
};

} // namespace kiln::dsl

#endif // KILN_DSL_KERNELBUILDER_H
