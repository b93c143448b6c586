//===- KernelBuilder.cpp - kernels, arguments, indices, memory, loops -----===//
#include "BuilderState.h"
#include "kiln/Dialect/Kiln/IR/TensorArgs.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Transforms/CSE.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <limits>

using namespace mlir;

namespace kiln::dsl {

static thread_local KernelBuilder::State *current = nullptr;

namespace detail {

KernelBuilder::State &state(const Loc &loc) {
  if (!current)
    userError(loc, "kiln DSL call outside a KernelBuilder");
  return *current;
}
OpBuilder &builder(const Loc &loc) { return state(loc).builder; }

Location location(const Loc &loc) {
  return FileLineColLoc::get(state(loc).ctx(), loc.file_name(), loc.line(),
                             loc.column());
}

void userError(const Loc &loc, const std::string &message) {
  throw Error(std::string(loc.file_name()) + ":" + std::to_string(loc.line()) +
              ": " + message);
}

std::string shapeStr(ArrayRef<int64_t> shape) {
  return shapeToString(std::vector<int64_t>(shape.begin(), shape.end()));
}

std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

uint64_t currentSerial() { return current ? current->serial : 0; }

void checkSameKernel(uint64_t serial, const Loc &loc, const std::string &what) {
  if (serial != state(loc).serial)
    userError(loc, what +
                       " was made while building another kernel (tiles, "
                       "Indexes and tensor views live as long as the "
                       "KernelBuilder that made them): build it again in "
                       "kernel '" +
                       current->kernel->name + "'");
}

void checkInScope(Value v, const Loc &loc, const std::string &what) {
  mlir::Block *at = builder(loc).getInsertionBlock();
  Region *made = v.getParentRegion();
  if (at && made && !made->isAncestor(at->getParent()))
    userError(loc, what + " was made inside a loop body (forRange) and is used "
                          "outside it: a value leaves a loop through carry()");
}

void checkIndex(const Index &i, const Loc &loc, const std::string &what) {
  if (!i.kernelSerial())
    return;
  checkSameKernel(i.kernelSerial(), loc, what);
  checkInScope(value(i.raw()), loc, what);
}

RankedTensorType tileType(const Tile &t, const Loc &loc, const char *op) {
  if (!t.valid())
    userError(loc, std::string(op) + ": tile is empty (default-constructed)");
  const std::string what = std::string(op) + ": the tile";
  checkSameKernel(t.kernelSerial(), loc, what);
  checkInScope(value(t.raw()), loc, what);
  return cast<RankedTensorType>(value(t.raw()).getType());
}

Value i32Constant(int64_t v, const Loc &loc) {
  if (v < std::numeric_limits<int32_t>::min() ||
      v > std::numeric_limits<int32_t>::max())
    userError(loc, "constant " + std::to_string(v) +
                       " does not fit kiln's 32-bit index width");
  OpBuilder &b = builder(loc);
  return arith::ConstantIntOp::create(b, location(loc), v, 32);
}

} // namespace detail

using namespace detail;

//===----------------------------------------------------------------------===//
// Index
//===----------------------------------------------------------------------===//

Index::Index(int64_t constant, Loc loc)
    : constant_(constant), extent_(GridExtent(constant)), loc_(loc) {}

Index Index::fromRaw(void *v, std::optional<int64_t> constant,
                     std::optional<GridExtent> extent) {
  Index i;
  i.value_ = v;
  i.kernel_ = currentSerial();
  i.constant_ = constant;
  i.extent_ = std::move(extent);
  return i;
}

void *Index::raw() const {
  // A constant is materialised where it is used, never cached: a cached value
  // made inside a loop body would not dominate a use after the loop.
  if (constant_)
    return detail::raw(i32Constant(*constant_, loc_));
  if (value_ && current && kernel_ != current->serial)
    throw Error("kiln DSL: an Index made while building another kernel is "
                "used in kernel '" +
                current->kernel->name +
                "' (an Index lives as long as the KernelBuilder that made it)");
  return value_;
}

template <class Op>
static Index indexOp(const Index &a, const IndexArg &b,
                     int64_t (*fold)(int64_t, int64_t),
                     std::optional<GridExtent> extent = std::nullopt) {
  if (a.isConstant() && b.value.isConstant()) {
    int64_t r = fold(a.constant(), b.value.constant());
    (void)i32Constant(r, b.loc); // range check only; folded in C++
    return Index(r, b.loc);
  }
  for (const Index *i : {&a, &b.value})
    checkIndex(*i, b.loc, "an Index");
  OpBuilder &bld = builder(b.loc);
  Value v =
      Op::create(bld, location(b.loc), value(a.raw()), value(b.value.raw()));
  return Index::fromRaw(raw(v), std::nullopt, std::move(extent));
}

/// The host formula of a * b, where both have one.
static std::optional<GridExtent> productExtent(const Index &a, const Index &b) {
  if (!a.extent() || !b.extent())
    return std::nullopt;
  GridExtent e = *a.extent();
  e.scale *= b.extent()->scale;
  e.factors.insert(e.factors.end(), b.extent()->factors.begin(),
                   b.extent()->factors.end());
  return e;
}

/// The host formula of cdiv(a, b): an argument (or cdiv of one) by a
/// positive constant.
static std::optional<GridExtent> cdivExtent(const Index &a, const Index &b) {
  if (!a.extent() || !b.isConstant() || b.constant() < 1 ||
      a.extent()->scale != 1 || a.extent()->factors.size() != 1)
    return std::nullopt;
  GridExtent e = *a.extent();
  e.factors[0].divisor *= b.constant();
  return e;
}

Index operator+(const Index &a, IndexArg b) {
  return indexOp<arith::AddIOp>(a, b,
                                [](int64_t x, int64_t y) { return x + y; });
}
Index operator-(const Index &a, IndexArg b) {
  return indexOp<arith::SubIOp>(a, b,
                                [](int64_t x, int64_t y) { return x - y; });
}
Index operator*(const Index &a, IndexArg b) {
  return indexOp<arith::MulIOp>(
      a, b, [](int64_t x, int64_t y) { return x * y; },
      productExtent(a, b.value));
}
Index operator/(const Index &a, IndexArg b) {
  if (b.value.isConstant() && b.value.constant() == 0)
    userError(b.loc, "index division by zero");
  return indexOp<arith::DivSIOp>(a, b,
                                 [](int64_t x, int64_t y) { return x / y; });
}
Index operator%(const Index &a, IndexArg b) {
  if (b.value.isConstant() && b.value.constant() == 0)
    userError(b.loc, "index remainder by zero");
  return indexOp<arith::RemSIOp>(a, b,
                                 [](int64_t x, int64_t y) { return x % y; });
}
Index operator+(int64_t a, IndexArg b) { return Index(a, b.loc) + b; }
Index operator*(int64_t a, IndexArg b) { return Index(a, b.loc) * b; }
Index operator-(int64_t a, IndexArg b) { return Index(a, b.loc) - b; }
Index min(Index a, Index b, Loc loc) {
  return indexOp<arith::MinSIOp>(
      a, IndexArg(b, loc), [](int64_t x, int64_t y) { return std::min(x, y); });
}
Index max(Index a, Index b, Loc loc) {
  return indexOp<arith::MaxSIOp>(
      a, IndexArg(b, loc), [](int64_t x, int64_t y) { return std::max(x, y); });
}
Index cdiv(Index a, Index b, Loc loc) {
  if (b.isConstant() && b.constant() <= 0)
    userError(loc, "cdiv by a non-positive constant");
  return indexOp<arith::CeilDivSIOp>(
      a, IndexArg(b, loc), [](int64_t x, int64_t y) { return (x + y - 1) / y; },
      cdivExtent(a, b));
}

Index programId(int axis, Loc loc) {
  if (axis < 0 || axis > 2)
    userError(loc,
              "programId: axis " + std::to_string(axis) + " is not 0, 1 or 2");
  OpBuilder &b = builder(loc);
  Value v = ProgramIdOp::create(b, location(loc), b.getI32Type(),
                                b.getI32IntegerAttr(axis));
  return Index::fromRaw(raw(v), std::nullopt);
}

Index numPrograms(int axis, Loc loc) {
  if (axis < 0 || axis > 2)
    userError(loc, "numPrograms: axis " + std::to_string(axis) +
                       " is not 0, 1 or 2");
  // A grid compiled in folds to a constant; the hardware's count otherwise.
  KernelBuilder::State &st = state(loc);
  if (st.gridSet && st.kernel->grid[axis].isConstant())
    return Index(st.kernel->grid[axis].scale, loc);
  OpBuilder &b = builder(loc);
  Value v = NumProgramsOp::create(b, location(loc), b.getI32Type(),
                                  b.getI32IntegerAttr(axis));
  return Index::fromRaw(raw(v), std::nullopt);
}

//===----------------------------------------------------------------------===//
// KernelBuilder
//===----------------------------------------------------------------------===//

KernelBuilder::KernelBuilder(const std::string &name,
                             std::initializer_list<int64_t> grid, Loc loc)
    : KernelBuilder(
          name,
          std::array<int64_t, 3>{grid.size() > 0 ? grid.begin()[0] : 1,
                                 grid.size() > 1 ? grid.begin()[1] : 1,
                                 grid.size() > 2 ? grid.begin()[2] : 1},
          loc) {
  if (grid.size() == 0 || grid.size() > 3) {
    current = nullptr;
    userError(loc, "KernelBuilder: the grid has 1 to 3 dimensions, got " +
                       std::to_string(grid.size()));
  }
}

KernelBuilder::KernelBuilder(const std::string &name,
                             std::array<int64_t, 3> grid, Loc loc)
    : KernelBuilder(name, loc) {
  for (int64_t g : grid)
    if (g < 1 || g > std::numeric_limits<int32_t>::max()) {
      current = nullptr;
      userError(loc, "KernelBuilder: grid dimension " + std::to_string(g) +
                         " is not in [1, 2^31)");
    }
  setGrid({Index(grid[0], loc), Index(grid[1], loc), Index(grid[2], loc)}, loc);
}

KernelBuilder::KernelBuilder(const std::string &name, Loc loc) {
  if (current)
    userError(loc, "KernelBuilder: another kernel is being built on this "
                   "thread (finish it first)");
  if (name.empty())
    userError(loc, "KernelBuilder: empty kernel name");
  state_ = std::make_unique<State>(makeKilnContext());
  static std::atomic<uint64_t> serials{0};
  state_->serial = ++serials;
  state_->createdAt = loc;
  state_->kernel->name = name;
  current = state_.get();

  OpBuilder &b = state_->builder;
  Location l = location(loc);
  state_->kernel->module = ModuleOp::create(l);
  b.setInsertionPointToEnd(state_->kernel->module->getBody());
  auto func = func::FuncOp::create(b, l, name, b.getFunctionType({}, {}));
  func->setAttr(kKernelAttr, b.getUnitAttr());
  state_->func = func;
  b.setInsertionPointToStart(func.addEntryBlock());
}

void KernelBuilder::setGrid(std::vector<Index> grid, Loc loc) {
  if (!state_ || current != state_.get())
    userError(loc, "setGrid: the kernel is finished");
  if (grid.empty() || grid.size() > 3)
    userError(loc, "setGrid: the grid has 1 to 3 dimensions, got " +
                       std::to_string(grid.size()));
  grid.resize(3, Index(1, loc));
  GridExtents extents;
  for (int a = 0; a < 3; ++a) {
    const Index &g = grid[a];
    std::string axis = "setGrid: extent " + std::string(1, char('x' + a));
    if (g.isConstant() && (g.constant() < 1 ||
                           g.constant() > std::numeric_limits<int32_t>::max()))
      userError(loc, axis + " = " + std::to_string(g.constant()) +
                         " is not in [1, 2^31)");
    if (!g.extent())
      userError(loc, axis + " is not a product of constants, run-time integer "
                            "arguments and cdiv(argument, constant), which "
                            "the host evaluates at each launch");
    extents[a] = *g.extent();
  }
  State &st = *state_;
  st.kernel->grid = extents;
  st.gridSet = true;
  std::vector<int64_t> fixed;
  std::vector<Attribute> formulas;
  bool dynamic = false;
  for (const GridExtent &e : extents) {
    fixed.push_back(e.isConstant() ? e.scale : kDynamicDim);
    formulas.push_back(st.builder.getStringAttr(e.str()));
    dynamic |= !e.isConstant();
  }
  st.func->setAttr(kGridAttr, st.builder.getDenseI64ArrayAttr(fixed));
  // Run-time extents as GridExtent::str() formulas over argument numbers:
  // what a persistent kernel evaluates on the device.
  if (dynamic)
    st.func->setAttr(kGridExtentsAttr, st.builder.getArrayAttr(formulas));
  else
    st.func->removeAttr(kGridExtentsAttr);
}

KernelBuilder::~KernelBuilder() {
  if (current == state_.get())
    current = nullptr;
}

TensorView KernelBuilder::tensorArg(const std::string &name, DType dtype,
                                    Dims dimList, Loc loc) {
  std::vector<Index> &dims = dimList.dims;
  if (!state_ || current != state_.get())
    userError(loc, "tensorArg: the kernel is finished");
  if (dims.empty())
    userError(loc,
              "tensorArg " + name + ": a tensor needs at least one dimension");
  Kernel::Impl &k = *state_->kernel;
  mlir::Block &entry = state_->func.getBody().front();
  // Each dimension: a constant in range, or a run-time integer argument
  // itself (its parameter is what a launch binds from the tensor's shape).
  Shape shape;
  std::vector<int> dimParams;
  for (size_t d = 0; d < dims.size(); ++d) {
    const Index &i = dims[d];
    std::string what = "tensorArg " + name + ": dimension " + std::to_string(d);
    if (i.isConstant()) {
      if (i.constant() < 1 ||
          i.constant() > std::numeric_limits<int32_t>::max())
        userError(loc,
                  "tensorArg " + name + ": dimension " +
                      std::to_string(i.constant()) + " of shape " +
                      shapeToString(
                          TensorView(nullptr, dtype, dims, {}, name).shape()) +
                      " is not in [1, 2^31)");
      shape.push_back(i.constant());
      dimParams.push_back(-1);
      continue;
    }
    auto arg = dyn_cast<BlockArgument>(value(i.raw()));
    if (!arg || arg.getOwner() != &entry ||
        k.params[arg.getArgNumber()].kind != ParamInfo::Kind::Scalar ||
        !i.extent() || i.extent()->factors.size() != 1 ||
        i.extent()->factors[0].divisor != 1 || i.extent()->scale != 1)
      userError(loc, what + " is neither a constant nor a run-time integer "
                            "argument (scalarArg); compute it on the host "
                            "and pass it as one");
    shape.push_back(kDynamicDim);
    dimParams.push_back(int(arg.getArgNumber()));
  }
  for (const TensorParamInfo &t : k.tensors)
    if (t.name == name)
      userError(loc, "tensorArg: a tensor named " + name + " exists already");

  Location l = location(loc);
  TensorParamInfo info{name, dtype, shape, int(k.params.size()), {}};
  if (llvm::any_of(dimParams, [](int p) { return p >= 0; }))
    info.dimParams = dimParams;
  Value ptr = entry.addArgument(
      PointerType::get(state_->ctx(), mlirType(state_->ctx(), dtype)), l);
  k.params.push_back({name, ParamInfo::Kind::Pointer, dtype});
  std::vector<Index> strides;
  for (size_t d = 0; d < shape.size(); ++d) {
    info.strideParams.push_back(int(k.params.size()));
    Value s = entry.addArgument(state_->builder.getI32Type(), l);
    k.params.push_back({name + "_stride" + std::to_string(d),
                        ParamInfo::Kind::Scalar, DType::i32});
    strides.push_back(Index::fromRaw(raw(s), std::nullopt));
  }
  k.tensors.push_back(info);
  return TensorView(raw(ptr), dtype, std::move(dims), std::move(strides), name);
}

Index KernelBuilder::scalarArg(const std::string &name, Loc loc) {
  return scalarArg(name, 1, loc);
}

Index KernelBuilder::scalarArg(const std::string &name, int64_t multipleOf,
                               Loc loc) {
  if (multipleOf < 1 || multipleOf > std::numeric_limits<int32_t>::max())
    userError(loc, "scalarArg " + name + ": multipleOf " +
                       std::to_string(multipleOf) + " is not in [1, 2^31)");
  if (!state_ || current != state_.get())
    userError(loc, "scalarArg: the kernel is finished");
  Kernel::Impl &k = *state_->kernel;
  if (name.empty())
    userError(loc, "scalarArg: give the argument a name");
  for (const ParamInfo &p : k.params)
    if (p.name == name)
      userError(loc, "scalarArg: a parameter named " + name + " exists already");
  Value v = state_->func.getBody().front().addArgument(
      state_->builder.getI32Type(), location(loc));
  GridExtent extent;
  extent.factors.push_back({int(k.params.size()), 1});
  k.params.push_back({name, ParamInfo::Kind::Scalar, DType::i32});
  k.params.back().multipleOf = multipleOf;
  return Index::fromRaw(raw(v), std::nullopt, extent);
}

void KernelBuilder::keepUnspecialised(const TensorView &tensor, Loc loc) {
  if (!state_ || current != state_.get())
    userError(loc, "keepUnspecialised: the kernel is finished");
  for (TensorParamInfo &t : state_->kernel->tensors)
    if (t.name == tensor.name()) {
      t.specialisable = false;
      return;
    }
  userError(loc, "keepUnspecialised: " + tensor.name() +
                     " is not a tensor argument of this kernel (a view of "
                     "one is not)");
}

void KernelBuilder::requireContiguous(const TensorView &tensor, Loc loc) {
  if (!state_ || current != state_.get())
    userError(loc, "requireContiguous: the kernel is finished");
  for (TensorParamInfo &t : state_->kernel->tensors)
    if (t.name == tensor.name()) {
      t.contiguous = true; // kContiguousArgAttr once the signature is final
      return;
    }
  userError(loc, "requireContiguous: " + tensor.name() +
                     " is not a tensor argument of this kernel (a view of "
                     "one is not)");
}

void KernelBuilder::requireAtLeast(Index a, Index b, Loc loc) {
  if (!state_ || current != state_.get())
    userError(loc, "requireAtLeast: the kernel is finished");
  mlir::Block &entry = state_->func.getBody().front();
  auto paramOf = [&](const Index &i) {
    auto arg = i.isConstant() ? BlockArgument()
                              : dyn_cast<BlockArgument>(value(i.raw()));
    if (!arg || arg.getOwner() != &entry ||
        state_->kernel->params[arg.getArgNumber()].kind !=
            ParamInfo::Kind::Scalar)
      userError(loc, "requireAtLeast: both values must be run-time integer "
                     "arguments (scalarArg)");
    return int(arg.getArgNumber());
  };
  int pa = paramOf(a), pb = paramOf(b);
  state_->kernel->params[pa].atLeastParam = pb;
}

/// A schedule choice that is a unit attribute on the kernel: present or not.
static void setFlag(mlir::func::FuncOp func, llvm::StringRef name, bool on) {
  if (on)
    func->setAttr(name, mlir::UnitAttr::get(func.getContext()));
  else
    func->removeAttr(name);
}

void KernelBuilder::setWarps(int warps, Loc loc) {
  if (warps < 1 || warps > 32 || (warps & (warps - 1)))
    userError(loc, "setWarps: " + std::to_string(warps) +
                       " is not a power of two in [1, 32]");
  state_->kernel->numWarps = warps;
  state_->func->setAttr("kiln.num_warps",
                        state_->builder.getI32IntegerAttr(warps));
}

void KernelBuilder::setStages(int stages, Loc loc) {
  if (stages < 2 || stages > 8)
    userError(loc,
              "setStages: " + std::to_string(stages) + " is not in [2, 8]");
  state_->kernel->numStages = stages;
  state_->func->setAttr("kiln.num_stages",
                        state_->builder.getI32IntegerAttr(stages));
}

void KernelBuilder::setMinBlocksPerSM(int blocks, Loc loc) {
  if (blocks < 1 || blocks > 32)
    userError(loc, "setMinBlocksPerSM: " + std::to_string(blocks) +
                       " is not in [1, 32]");
  state_->func->setAttr("kiln.min_blocks_per_sm",
                        state_->builder.getI32IntegerAttr(blocks));
}

void KernelBuilder::setReloadThreadIds(bool reload) {
  state_->kernel->reloadThreadIds = reload;
  if (reload)
    state_->func->setAttr("kiln.reload_thread_ids",
                          state_->builder.getUnitAttr());
}

void KernelBuilder::setInvariantAInRegisters(bool inRegisters) {
  setFlag(state_->func, "kiln.invariant_a_in_registers", inRegisters);
}

void KernelBuilder::setCopyAddressesPerRegister(bool perRegister) {
  setFlag(state_->func, "kiln.copy_addresses_per_register", perRegister);
}

void KernelBuilder::setSkipDeadRows(bool skip) {
  setFlag(state_->func, "kiln.keep_dead_rows", !skip);
}

void KernelBuilder::setSkipPassingMasks(bool skip) {
  setFlag(state_->func, "kiln.skip_passing_masks", skip);
}

void KernelBuilder::setWgmma(bool wgmma) {
  if (wgmma)
    state_->func->setAttr("kiln.mma", state_->builder.getStringAttr("wgmma"));
  else
    state_->func->removeAttr("kiln.mma");
}

void KernelBuilder::setTma(bool tma) { setFlag(state_->func, "kiln.tma", tma); }

void KernelBuilder::setTmaStores(bool tmaStores) {
  setFlag(state_->func, "kiln.tma_stores", tmaStores);
}

void KernelBuilder::setOneShotLoads(bool oneShot) {
  setFlag(state_->func, "kiln.one_shot_loads", oneShot);
}

void KernelBuilder::setWarpSpecialize(bool specialize) {
  setFlag(state_->func, "kiln.warp_specialize", specialize);
}

void KernelBuilder::setPingpong(bool pingpong) {
  setFlag(state_->func, "kiln.pingpong", pingpong);
}

void KernelBuilder::setOverlapDots(bool overlap) {
  setFlag(state_->func, "kiln.overlap_dots", overlap);
}

void KernelBuilder::setPeelFirstIteration(bool peel) {
  setFlag(state_->func, "kiln.peel_first_iteration", peel);
}

void KernelBuilder::setPersistent(bool persistent) {
  setFlag(state_->func, "kiln.persistent", persistent);
}

void KernelBuilder::setDynamicTiles(bool dynamic) {
  setFlag(state_->func, "kiln.dynamic_tiles", dynamic);
}

void KernelBuilder::setFreshProgramValues(bool fresh) {
  setFlag(state_->func, "kiln.fresh_program_values", fresh);
}

void KernelBuilder::overlapPreviousLaunch(bool overlap) {
  setFlag(state_->func, "kiln.overlap_previous", overlap);
}

Kernel KernelBuilder::finish(Loc loc) {
  if (!state_ || current != state_.get())
    userError(loc, "finish: the kernel is finished already");
  if (!state_->gridSet)
    userError(loc, "finish: kernel " + state_->kernel->name +
                       " has no grid (give it to the constructor or setGrid)");
  if (!state_->abandonedLoop.empty())
    userError(loc, "finish: kernel " + state_->kernel->name +
                       ": the body of the forRange at " +
                       state_->abandonedLoop +
                       " was left by an exception, so that loop holds part "
                       "of its body; build the kernel again");
  OpBuilder &b = state_->builder;
  func::FuncOp func = state_->func;
  b.setInsertionPointToEnd(&func.getBody().front());
  func::ReturnOp::create(b, location(loc));
  func.setType(
      b.getFunctionType(func.getBody().front().getArgumentTypes(), {}));
  // Parameter names, so that the printed IR says which argument is which.
  for (auto [i, p] : llvm::enumerate(state_->kernel->params)) {
    func.setArgAttr(i, "kiln.name", b.getStringAttr(p.name));
    // What the compiler may assume of a value the kernel is built for
    // multiples of: its largest power-of-two factor (knownDivisor's terms).
    if (p.multipleOf > 1)
      func.setArgAttr(i, kDivisibilityArgAttr,
                      b.getI64IntegerAttr(p.multipleOf & -p.multipleOf));
    if (p.atLeastParam >= 0)
      func.setArgAttr(i, kAtLeastArgAttr, b.getI64IntegerAttr(p.atLeastParam));
  }
  // A tensor's shape on its pointer (its strides are the arguments after it):
  // what a TMA tensor map over the whole tensor needs.
  for (const TensorParamInfo &t : state_->kernel->tensors) {
    func.setArgAttr(t.pointerParam, kTensorShapeAttr,
                    b.getDenseI64ArrayAttr(t.shape));
    if (!t.dimParams.empty())
      func.setArgAttr(t.pointerParam, kTensorDimsAttr,
                      b.getDenseI32ArrayAttr(t.dimParams));
    if (t.contiguous)
      func.setArgAttr(t.pointerParam, kContiguousArgAttr, b.getUnitAttr());
  }

  std::string diags;
  llvm::raw_string_ostream os(diags);
  {
    ScopedDiagnosticHandler handler(state_->ctx(), [&](Diagnostic &d) {
      os << d.getLocation() << ": " << d << "\n";
      return success();
    });
    if (failed(verify(*state_->kernel->module)))
      throw InternalError("the DSL built invalid IR for kernel " +
                          state_->kernel->name + ":\n" + diags);
    // Fold what the shape constants make constant and drop duplicates, so
    // the kernel's IR holds only the computation that depends on run-time
    // values. Only the canonicalizations of the dialects a kiln kernel uses:
    // collecting those of every loaded dialect (LLVM and NVVM for the
    // lowering) took a third of building an attention kernel.
    MLIRContext *ctx = state_->ctx();
    RewritePatternSet patterns(ctx);
    for (StringRef ns : {"kiln", "arith", "math", "scf", "func"})
      if (Dialect *d = ctx->getLoadedDialect(ns))
        d->getCanonicalizationPatterns(patterns);
    for (RegisteredOperationName op : ctx->getRegisteredOperations())
      if (llvm::is_contained({StringRef("kiln"), StringRef("arith"),
                              StringRef("math"), StringRef("scf"),
                              StringRef("func")},
                             op.getDialectNamespace()))
        op.getCanonicalizationPatterns(patterns, ctx);
    ModuleOp module = *state_->kernel->module;
    (void)applyPatternsGreedily(module, std::move(patterns));
    IRRewriter rewriter(ctx);
    DominanceInfo dom(module);
    // Not verified again here (a tenth of a cache hit): folding valid IR
    // with upstream patterns keeps it valid, and compileForGpu verifies the
    // kernel after its own passes.
    eliminateCommonSubExpressions(rewriter, dom, module);
  }
  current = nullptr;
  Kernel k(std::move(state_->kernel));
  state_.reset();
  return k;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

TensorView::TensorView(void *pointer, DType dtype, std::vector<Index> dims,
                       std::vector<Index> strides, std::string name)
    : pointer_(pointer), kernel_(currentSerial()), dtype_(dtype),
      dims_(std::move(dims)), strides_(std::move(strides)),
      name_(std::move(name)) {
  for (const Index &d : dims_)
    shape_.push_back(d.isConstant() ? d.constant() : kDynamicDim);
}

TensorView TensorView::operator[](IndexArg i) const {
  checkSameKernel(kernel_, i.loc, "indexing " + name_ + ": the view");
  if (shape_.size() < 2)
    userError(i.loc, "indexing " + name_ + ": a " + shapeToString(shape_) +
                         " view has no leading dimension to drop");
  if (i.value.isConstant() &&
      (i.value.constant() < 0 ||
       (shape_[0] != kDynamicDim && i.value.constant() >= shape_[0])))
    userError(i.loc, "indexing " + name_ + ": index " +
                         std::to_string(i.value.constant()) +
                         " is out of range for dimension 0 of " +
                         shapeToString(shape_));
  // Pointer offsets are i64: a view may start past 2^31 elements.
  OpBuilder &b = builder(i.loc);
  Location l = location(i.loc);
  Value idx =
      arith::ExtSIOp::create(b, l, b.getI64Type(), value(i.value.raw()));
  Value stride =
      arith::ExtSIOp::create(b, l, b.getI64Type(), value(strides_[0].raw()));
  Value off = arith::MulIOp::create(b, l, idx, stride);
  Value p =
      AddPtrOp::create(b, l, value(pointer_).getType(), value(pointer_), off);
  return TensorView(
      raw(p), dtype_, std::vector<Index>(dims_.begin() + 1, dims_.end()),
      std::vector<Index>(strides_.begin() + 1, strides_.end()), name_ + "[]");
}

Block TensorView::block(std::vector<Index> offsets, Shape blockShape,
                        Loc loc) const {
  checkSameKernel(kernel_, loc, "block of " + name_ + ": the view");
  if (offsets.size() != shape_.size())
    userError(loc, "block of " + name_ + ": " + std::to_string(offsets.size()) +
                       " offsets for a " + shapeToString(shape_) + " view");
  if (!blockShape.empty() && blockShape.size() != shape_.size())
    userError(loc, "block of " + name_ + ": block shape " +
                       shapeToString(blockShape) + " has rank " +
                       std::to_string(blockShape.size()) + ", the view " +
                       shapeToString(shape_) + " has rank " +
                       std::to_string(shape_.size()));
  for (int64_t d : blockShape)
    if (d < 1)
      userError(loc, "block of " + name_ + ": block shape " +
                         shapeToString(blockShape) + " has an empty dimension");
  return Block{*this, std::move(offsets), std::move(blockShape), loc};
}

static void blockOperands(const Block &blk, const Loc &loc,
                          SmallVectorImpl<Value> &offsets,
                          SmallVectorImpl<Value> &shape,
                          SmallVectorImpl<Value> &strides) {
  const std::string what = "block of " + blk.view.name() + ": ";
  checkInScope(value(blk.view.pointer()), loc, what + "the view");
  for (const Index &o : blk.offsets) {
    checkIndex(o, loc, what + "an offset");
    offsets.push_back(value(o.raw()));
  }
  for (const Index &d : blk.view.dims())
    shape.push_back(value(d.raw()));
  for (const Index &s : blk.view.strides())
    strides.push_back(value(s.raw()));
}

Tile load(const Block &blk, double padding, Loc loc) {
  if (blk.shape.empty())
    userError(loc, "load from " + blk.view.name() +
                       ": the block needs a shape (block(offsets, shape))");
  OpBuilder &b = builder(loc);
  SmallVector<Value> offsets, shape, strides;
  blockOperands(blk, loc, offsets, shape, strides);
  auto type = RankedTensorType::get(
      blk.shape, mlirType(state(loc).ctx(), blk.view.dtype()));
  auto op = LoadOp::create(b, location(loc), type, value(blk.view.pointer()),
                           offsets, shape, strides, b.getF64FloatAttr(padding));
  return Tile::fromRaw(raw(op.getResult()));
}

/// Checks a tile written into a block (a store or an atomic): its dtype and
/// rank are the tensor's, its shape the block's when given.
static void checkWrittenTile(const Block &blk, RankedTensorType t,
                             const std::string &what, const Loc &loc) {
  if (dtypeOf(t.getElementType()) != blk.view.dtype())
    userError(loc, what + "tile is " + typeStr(t.getElementType()) +
                       " but the tensor holds " + dtypeName(blk.view.dtype()) +
                       " (convert with .to(...))");
  if ((size_t)t.getRank() != blk.view.shape().size())
    userError(loc, what + "a " + shapeStr(t.getShape()) + " tile into a " +
                       shapeToString(blk.view.shape()) +
                       " view (ranks differ)");
  if (!blk.shape.empty() && ArrayRef<int64_t>(blk.shape) != t.getShape())
    userError(loc, what + "store of the wrong shape: block is " +
                       shapeToString(blk.shape) + ", tile is " +
                       shapeStr(t.getShape()));
}

void store(const Block &blk, const Tile &tile, Loc loc) {
  RankedTensorType t = tileType(tile, loc, "store");
  checkWrittenTile(blk, t, "store to " + blk.view.name() + ": ", loc);
  OpBuilder &b = builder(loc);
  SmallVector<Value> offsets, shape, strides;
  blockOperands(blk, loc, offsets, shape, strides);
  StoreOp::create(b, location(loc), value(tile.raw()),
                  value(blk.view.pointer()), offsets, shape, strides);
}

static void atomic(ReduceKind kind, const char *name, const Block &blk,
                   const Tile &tile, const Loc &loc) {
  RankedTensorType t = tileType(tile, loc, name);
  std::string what = std::string(name) + " to " + blk.view.name() + ": ";
  checkWrittenTile(blk, t, what, loc);
  Type elem = t.getElementType();
  if (kind == ReduceKind::Sum ? !(elem.isF32() || elem.isInteger(32))
                              : !elem.isInteger(32))
    userError(loc, what + (kind == ReduceKind::Sum ? "f32 or i32" : "i32") +
                       " tiles only, got " + typeStr(elem));
  OpBuilder &b = builder(loc);
  SmallVector<Value> offsets, shape, strides;
  blockOperands(blk, loc, offsets, shape, strides);
  AtomicRMWOp::create(b, location(loc), kind, value(tile.raw()),
                      value(blk.view.pointer()), offsets, shape, strides);
}

void atomicAdd(const Block &blk, const Tile &tile, Loc loc) {
  atomic(ReduceKind::Sum, "atomicAdd", blk, tile, loc);
}
void atomicMax(const Block &blk, const Tile &tile, Loc loc) {
  atomic(ReduceKind::Max, "atomicMax", blk, tile, loc);
}
void atomicMin(const Block &blk, const Tile &tile, Loc loc) {
  atomic(ReduceKind::Min, "atomicMin", blk, tile, loc);
}


//===----------------------------------------------------------------------===//
// Loops
//===----------------------------------------------------------------------===//

void forRange(Index lo, Index hi, Index step,
              const std::function<void(Index)> &body, Loc loc) {
  forRange(lo, hi, step, Carry{}, body, loc);
}

/// The body's carried tiles, checked against what entered the loop, as the
/// loop's yield.
static void yieldCarried(OpBuilder &b, Location l, const Carry &carried,
                         ArrayRef<Value> inits, const Loc &loc) {
  if (inits.empty())
    return;
  SmallVector<Value> yields;
  for (auto [i, t] : llvm::enumerate(carried.tiles)) {
    Value v = t->valid() ? value(t->raw()) : Value();
    if (!v || v.getType() != inits[i].getType())
      userError(loc, "forRange: carried tile #" + std::to_string(i) +
                         " enters the loop as " + typeStr(inits[i].getType()) +
                         " and leaves the body as " +
                         (v ? typeStr(v.getType()) : std::string("nothing")) +
                         " (a carried tile keeps its shape and dtype)");
    yields.push_back(v);
  }
  scf::YieldOp::create(b, l, yields);
}

void forRange(Index lo, Index hi, Index step, Carry carried,
              const std::function<void(Index)> &body, Loc loc) {
  if (step.isConstant() && step.constant() <= 0)
    userError(loc, "forRange: step must be positive, got " +
                       std::to_string(step.constant()));
  OpBuilder &b = builder(loc);
  Location l = location(loc);
  for (const Index *i : {&lo, &hi, &step})
    checkIndex(*i, loc, "forRange: a bound");
  SmallVector<Value> inits;
  for (auto [i, t] : llvm::enumerate(carried.tiles)) {
    if (!t->valid())
      userError(loc, "forRange: carried tile #" + std::to_string(i) +
                         " has no value before the loop");
    (void)tileType(*t, loc, "forRange: carried");
    inits.push_back(value(t->raw()));
  }
  auto forOp = scf::ForOp::create(b, l, value(lo.raw()), value(hi.raw()),
                                  value(step.raw()), inits);
  OpBuilder::InsertionGuard guard(b);
  mlir::Block *bodyBlock = forOp.getBody();
  if (inits.empty())
    b.setInsertionPoint(bodyBlock->getTerminator());
  else
    b.setInsertionPointToStart(bodyBlock);
  for (auto [t, arg] : llvm::zip(carried.tiles, forOp.getRegionIterArgs()))
    *t = Tile::fromRaw(raw(arg));
  try {
    body(Index::fromRaw(raw(forOp.getInductionVar()), std::nullopt));
    yieldCarried(b, l, carried, inits, loc);
  } catch (...) {
    // The body threw (a DSL error the user may catch, or their own): the
    // loop holds the part of the body built so far. Its IR stays well
    // formed (the iteration arguments yielded unchanged), the carried tiles
    // are what they were before the loop, and finish() refuses the kernel
    // rather than compile a loop that holds part of its body.
    if (bodyBlock->empty() ||
        !bodyBlock->back().hasTrait<OpTrait::IsTerminator>()) {
      b.setInsertionPointToEnd(bodyBlock);
      scf::YieldOp::create(b, l, forOp.getRegionIterArgs());
    }
    for (auto [t, v] : llvm::zip(carried.tiles, inits))
      *t = Tile::fromRaw(raw(v));
    KernelBuilder::State &st = state(loc);
    if (st.abandonedLoop.empty())
      st.abandonedLoop =
          std::string(loc.file_name()) + ":" + std::to_string(loc.line());
    throw;
  }
  for (auto [t, res] : llvm::zip(carried.tiles, forOp.getResults()))
    *t = Tile::fromRaw(raw(res));
}

} // namespace kiln::dsl
