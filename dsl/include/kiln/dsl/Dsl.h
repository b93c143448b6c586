//===- Dsl.h - kiln's embedded tile language --------------------*- C++ -*-===//
//
// A kernel is a C++ function of its compile-time constants and a Config that
// builds kiln IR through these calls:
//
//   KernelBuilder k("gemm", {cdiv(M, c.blockM), cdiv(N, c.blockN)});
//   auto A = k.tensorArg("A", bf16, {M, K});
//   Tile a = load(A.block({m0, k0}, {c.blockM, c.blockK}));
//
// Every call records the caller's std::source_location as the op's location,
// and misuse (a dot of mismatched shapes, mixed dtypes, ...) throws kiln::Error
// naming the caller's file:line and the shapes. No MLIR header is needed here:
// values are held as opaque pointers.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DSL_DSL_H
#define KILN_DSL_DSL_H

#include "kiln/Compiler/Kernel.h"
#include "kiln/runtime/DType.h"
#include "kiln/runtime/Error.h"

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

namespace kiln::dsl {

using Loc = std::source_location;
using Shape = std::vector<int64_t>;
using kiln::DType;
inline constexpr DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16,
                       i32 = DType::i32, i1 = DType::i1;
inline constexpr double inf = __builtin_inf();
inline constexpr double log2e = 1.4426950408889634;
inline constexpr double ln2 = 0.6931471805599453;

constexpr int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// An i32 scalar computed in the kernel (a program id, an offset). Built from
/// an integer it is a constant, and arithmetic on constants folds in C++.
class Index {
public:
  Index(int64_t constant, Loc loc = Loc::current());
  bool isConstant() const { return constant_.has_value(); }
  int64_t constant() const { return *constant_; }
  void *raw() const;
  /// For a constant, a run-time integer argument, and products and cdivs by
  /// constants of them: the host-side formula (what a launch grid's extent
  /// may be); nullopt for anything the host cannot evaluate.
  const std::optional<GridExtent> &extent() const { return extent_; }
  /// The KernelBuilder (a number per builder) that made it; 0 for a
  /// constant, which serves any kernel.
  uint64_t kernelSerial() const { return constant_ ? 0 : kernel_; }

  static Index fromRaw(void *value, std::optional<int64_t> constant,
                       std::optional<GridExtent> extent = std::nullopt);

private:
  Index() = default;
  void *value_ = nullptr; // materialised lazily for constants
  uint64_t kernel_ = 0;   // the KernelBuilder that made value_
  std::optional<int64_t> constant_;
  std::optional<GridExtent> extent_;
  Loc loc_;
};

/// An Index operand that remembers the line it was written on.
struct IndexArg {
  IndexArg(Index v, Loc l = Loc::current()) : value(v), loc(l) {}
  IndexArg(int64_t c, Loc l = Loc::current()) : value(c, l), loc(l) {}
  Index value;
  Loc loc;
};

Index operator+(const Index &a, IndexArg b);
Index operator-(const Index &a, IndexArg b);
Index operator*(const Index &a, IndexArg b);
Index operator/(const Index &a, IndexArg b); ///< rounds toward zero
Index operator%(const Index &a, IndexArg b);
Index operator+(int64_t a, IndexArg b);
Index operator-(int64_t a, IndexArg b);
Index operator*(int64_t a, IndexArg b);
Index min(Index a, Index b, Loc loc = Loc::current());
Index max(Index a, Index b, Loc loc = Loc::current());
Index cdiv(Index a, Index b, Loc loc = Loc::current());

/// A tile: a value of static shape and one element type.
class Tile {
public:
  Tile() = default;
  Shape shape() const;
  DType dtype() const;
  int64_t rank() const { return int64_t(shape().size()); }
  /// Element type conversion (rounds to nearest even).
  Tile to(DType dtype, Loc loc = Loc::current()) const;
  /// Its IR value; throws kiln::Error when the tile was made while another
  /// kernel was built (a Tile lives as long as its KernelBuilder).
  void *raw() const;
  bool valid() const { return value_ != nullptr; }
  /// The KernelBuilder (a number per builder) that made it; 0 when empty.
  uint64_t kernelSerial() const { return kernel_; }

  static Tile fromRaw(void *value);

private:
  void *value_ = nullptr;
  uint64_t kernel_ = 0;
};

/// One operand of a tile operator: a tile, a number (splat to the other
/// operand's dtype) or an Index (splat as i32). It records the user's line.
struct TileArg {
  TileArg(const Tile &t, Loc l = Loc::current()) : tile(t), loc(l) {}
  template <class T>
  requires std::is_arithmetic_v<T> TileArg(T s, Loc l = Loc::current())
      : number(double(s)), loc(l) {}
  TileArg(const Index &i, Loc l = Loc::current()) : index(i), loc(l) {}
  std::optional<Tile> tile;
  std::optional<double> number;
  std::optional<Index> index;
  Loc loc;
};

// Elementwise arithmetic. Operands of rank r broadcast along their size-1
// dimensions (an Mx1 column against an MxN tile); ranks must be equal.
Tile operator+(TileArg a, TileArg b);
Tile operator-(TileArg a, TileArg b);
Tile operator*(TileArg a, TileArg b);
Tile operator/(TileArg a, TileArg b);
Tile operator%(TileArg a, TileArg b); ///< remainder, sign of the dividend
Tile operator<(TileArg a, TileArg b);
Tile operator<=(TileArg a, TileArg b);
Tile operator>(TileArg a, TileArg b);
Tile operator>=(TileArg a, TileArg b);
Tile operator==(TileArg a, TileArg b);
Tile operator!=(TileArg a, TileArg b);
Tile operator&&(TileArg a, TileArg b);
Tile operator||(TileArg a, TileArg b);
// Integer (and mask) tiles only: bitwise and, or, xor; shifts (>> keeps the
// sign). A shift count outside [0, bits) gives an unspecified value.
Tile operator&(TileArg a, TileArg b);
Tile operator|(TileArg a, TileArg b);
Tile operator^(TileArg a, TileArg b);
Tile operator<<(TileArg a, TileArg b);
Tile operator>>(TileArg a, TileArg b);
Tile max(TileArg a, TileArg b, Loc loc = Loc::current());
Tile min(TileArg a, TileArg b, Loc loc = Loc::current());
/// cond ? a : b elementwise; cond is an i1 tile.
Tile where(TileArg cond, TileArg a, TileArg b, Loc loc = Loc::current());
Tile neg(const Tile &x, Loc loc = Loc::current());
Tile exp(const Tile &x, Loc loc = Loc::current());
Tile exp2(const Tile &x, Loc loc = Loc::current());
Tile log(const Tile &x, Loc loc = Loc::current());
Tile log2(const Tile &x, Loc loc = Loc::current());
Tile sqrt(const Tile &x, Loc loc = Loc::current());
Tile abs(const Tile &x, Loc loc = Loc::current()); ///< float or integer
Tile floor(const Tile &x, Loc loc = Loc::current());
Tile erf(const Tile &x, Loc loc = Loc::current()); ///< polynomial, ~1e-7

/// Transcendental functions, computed in fp32: Fast takes the GPU's
/// approximate instructions (tanh.approx, sin.approx, cos.approx,
/// rsqrt.approx; ex2/lg2.approx for pow, |error| about 1e-3 for tanh and
/// 1e-6 for the others), Precise a polynomial (tanh, sin, cos), an IEEE
/// square root and division (rsqrt), a few ulps. The CPU executor computes
/// both in full precision.
enum class MathMode { Fast, Precise };
Tile tanh(const Tile &x, MathMode mode = MathMode::Fast,
          Loc loc = Loc::current());
/// 1 / (1 + e^-x); Fast: 0.5·tanh.approx(x/2) + 0.5.
Tile sigmoid(const Tile &x, MathMode mode = MathMode::Fast,
             Loc loc = Loc::current());
Tile sin(const Tile &x, MathMode mode = MathMode::Fast,
         Loc loc = Loc::current());
Tile cos(const Tile &x, MathMode mode = MathMode::Fast,
         Loc loc = Loc::current());
Tile rsqrt(const Tile &x, MathMode mode = MathMode::Fast,
           Loc loc = Loc::current());
/// x^y elementwise for x > 0 (NaN for x < 0, as exp2(y·log2(x))); y may be
/// a number. Fast: ex2/lg2.approx; Precise: polynomial exp and log.
Tile pow(const Tile &x, TileArg y, Loc loc = Loc::current());
Tile pow(const Tile &x, TileArg y, MathMode mode, Loc loc = Loc::current());
/// exp, exp2, log, log2 in a mode: the one-argument forms above are Fast
/// (ex2.approx / lg2.approx, what attention's softmax takes); Precise: MLIR's
/// polynomial approximations in f32, a few ulps.
Tile exp(const Tile &x, MathMode mode, Loc loc = Loc::current());
Tile exp2(const Tile &x, MathMode mode, Loc loc = Loc::current());
Tile log(const Tile &x, MathMode mode, Loc loc = Loc::current());
Tile log2(const Tile &x, MathMode mode, Loc loc = Loc::current());

// Creation.
Tile full(const Shape &shape, double value, DType dtype,
          Loc loc = Loc::current());
Tile zeros(const Shape &shape, DType dtype, Loc loc = Loc::current());
/// 0, 1, ..., n-1 as i32.
Tile arange(int64_t n, Loc loc = Loc::current());
Tile splat(Index value, const Shape &shape, Loc loc = Loc::current());

// Shape.
Tile expandDims(const Tile &x, int64_t axis, Loc loc = Loc::current());
/// A vector of M elements as an Mx1 column (x[:, None]).
Tile column(const Tile &x, Loc loc = Loc::current());
/// A vector of N elements as a 1xN row (x[None, :]).
Tile row(const Tile &x, Loc loc = Loc::current());
Tile broadcastTo(const Tile &x, const Shape &shape, Loc loc = Loc::current());
/// Reverses the two dimensions of a 2-D tile.
Tile transpose(const Tile &x, Loc loc = Loc::current());
Tile permute(const Tile &x, const std::vector<int32_t> &order,
             Loc loc = Loc::current());

// Reductions along one axis.
Tile reduceSum(const Tile &x, int64_t axis, Loc loc = Loc::current());
Tile reduceMax(const Tile &x, int64_t axis, Loc loc = Loc::current());
Tile reduceMin(const Tile &x, int64_t axis, Loc loc = Loc::current());

/// a·b (+ acc) with fp32 accumulation: a is MxK, b is KxN, both bf16, f16 or
/// f32; the result is MxN f32.
Tile dot(const Tile &a, const Tile &b, Loc loc = Loc::current());
Tile dot(const Tile &a, const Tile &b, const Tile &acc,
         Loc loc = Loc::current());

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

struct Block;

/// A tensor in global memory seen through a pointer, a shape (each
/// dimension compiled in or a run-time integer argument) and run-time
/// strides. Indexing the leading dimension gives a view of one rank less.
class TensorView {
public:
  TensorView(void *pointer, DType dtype, std::vector<Index> dims,
             std::vector<Index> strides, std::string name);
  TensorView operator[](IndexArg i) const;
  Block block(std::vector<Index> offsets, Shape blockShape = {},
              Loc loc = Loc::current()) const;
  /// The shape, kDynamicDim where a dimension is read at run time.
  const Shape &shape() const { return shape_; }
  /// The dimensions as indices (constants or run-time arguments).
  const std::vector<Index> &dims() const { return dims_; }
  DType dtype() const { return dtype_; }
  const std::string &name() const { return name_; }
  void *pointer() const { return pointer_; }
  const std::vector<Index> &strides() const { return strides_; }

private:
  void *pointer_;
  uint64_t kernel_ = 0; // the KernelBuilder that made pointer_
  DType dtype_;
  Shape shape_;
  std::vector<Index> dims_;
  std::vector<Index> strides_;
  std::string name_;
};

/// A block of a tensor view: offsets and (optionally) a block shape.
struct Block {
  TensorView view;
  std::vector<Index> offsets;
  Shape shape; ///< empty: taken from the stored tile
  Loc loc;
};

/// Loads a block; elements outside the tensor read `padding`.
Tile load(const Block &block, double padding = 0.0, Loc loc = Loc::current());
/// Stores a tile into a block; elements outside the tensor are skipped.
void store(const Block &block, const Tile &value, Loc loc = Loc::current());
/// Combines a tile into a block with one atomic read-modify-write per
/// element (several programs may combine into the same elements): add for
/// f32 and i32 tiles, max and min for i32. Elements outside the tensor are
/// skipped.
void atomicAdd(const Block &block, const Tile &value, Loc loc = Loc::current());
void atomicMax(const Block &block, const Tile &value, Loc loc = Loc::current());
void atomicMin(const Block &block, const Tile &value, Loc loc = Loc::current());

/// Loads a (rows.shape[0], cols) tile whose row i is row rows[i] of the 2-D
/// view `table`, from column `col` on: an embedding lookup, a block table.
/// `rows` is a 1-D i32 tile; rows outside the table and columns past its end
/// read `padding`.
Tile gather(const TensorView &table, const Tile &rows, Index col, int64_t cols,
            double padding = 0.0, Loc loc = Loc::current());
/// Element i of a 1-D i32 view as an Index, the same in every thread: an
/// offset, a loop bound or a length read from memory. Outside the view it
/// is `padding`.
Index loadIndex(const TensorView &view, Index i, int64_t padding = 0,
                Loc loc = Loc::current());
/// Counts this program's arrival at element i of a 1-D i32 view, once per
/// program and after every global write it made before (stores, atomics)
/// has completed; returns the count before, the same in every thread. Of n
/// programs that arrive at one counter, the one that reads n - 1 is the last
/// and sees every write the others made before arriving: the place to finish
/// what they accumulated (convert an fp32 workspace). Outside the view it
/// counts nothing and reads -1. At the kernel's top level only (not in a
/// loop's body).
Index arrive(const TensorView &counters, Index i, Loc loc = Loc::current());
/// Waits until element i of a 1-D i32 view is at least `target`; then every
/// write that the programs counted there (arrive) made before arriving is
/// visible. Outside the view it waits for nothing. With
/// KernelBuilder::overlapPreviousLaunch, how a kernel reads what the
/// previous launch wrote as soon as that part is done. At the kernel's top
/// level only. A count never reached hangs a GPU launch until its watchdog
/// (about 20 s) ends it with a launch failure; the CPU executor, which runs
/// launches one after another, reports it at once.
void waitCount(const TensorView &counters, Index i, Index target,
               Loc loc = Loc::current());

//===----------------------------------------------------------------------===//
// Loops
//===----------------------------------------------------------------------===//

/// Tiles carried through a loop: inside the body the named variables are the
/// loop's iteration values, after the loop its results.
struct Carry {
  std::vector<Tile *> tiles;
};
template <class... Ts> Carry carry(Ts &...tiles) { return Carry{{&tiles...}}; }

/// for (i = lo; i < hi; i += step) body(i), carrying `carried`.
void forRange(Index lo, Index hi, Index step, Carry carried,
              const std::function<void(Index)> &body, Loc loc = Loc::current());
void forRange(Index lo, Index hi, Index step,
              const std::function<void(Index)> &body, Loc loc = Loc::current());

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

#endif // KILN_DSL_DSL_H
