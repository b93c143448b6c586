//===- KernelBuilder.cpp - kernels, their arguments and options -----------===//
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

uint64_t currentSerial() { return current ? current->serial : 0; }

KernelBuilder::State *currentState() { return current; }

} // namespace detail

using namespace detail;

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
      userError(loc,
                "scalarArg: a parameter named " + name + " exists already");
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

/// The parameter number of run-time integer argument `i` of the kernel
/// `state` builds; a user error naming `what` where `i` is not one.
static int scalarParamOf(KernelBuilder::State &state, const Index &i, Loc loc,
                         const char *what) {
  mlir::Block &entry = state.func.getBody().front();
  auto arg = i.isConstant() ? BlockArgument()
                            : dyn_cast<BlockArgument>(value(i.raw()));
  if (!arg || arg.getOwner() != &entry ||
      state.kernel->params[arg.getArgNumber()].kind != ParamInfo::Kind::Scalar)
    userError(loc, std::string(what) +
                       ": both values must be run-time integer arguments "
                       "(scalarArg)");
  return int(arg.getArgNumber());
}

void KernelBuilder::requireAtLeast(Index a, Index b, Loc loc) {
  if (!state_ || current != state_.get())
    userError(loc, "requireAtLeast: the kernel is finished");
  int pa = scalarParamOf(*state_, a, loc, "requireAtLeast"),
      pb = scalarParamOf(*state_, b, loc, "requireAtLeast");
  state_->kernel->params[pa].atLeastParam = pb;
}

void KernelBuilder::requireProduct(Index a, int64_t factor, Index b, Loc loc) {
  if (!state_ || current != state_.get())
    userError(loc, "requireProduct: the kernel is finished");
  if (factor < 1)
    userError(loc, "requireProduct: the factor must be >= 1, got " +
                       std::to_string(factor));
  int pa = scalarParamOf(*state_, a, loc, "requireProduct"),
      pb = scalarParamOf(*state_, b, loc, "requireProduct");
  state_->kernel->params[pa].productParam = pb;
  state_->kernel->params[pa].productFactor = factor;
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

} // namespace kiln::dsl
