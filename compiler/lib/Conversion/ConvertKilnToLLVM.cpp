//===- ConvertKilnToLLVM.cpp - the lowering as a pass ---------------------===//
//
// Each laid-out kernel func.func becomes an llvm.func (Lowerer, in
// LowerFunction.cpp and friends) in the same module, and the func.func goes.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"
#include "kiln/Transforms/Passes.h"
#include "kiln/runtime/Error.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <memory>

namespace kiln {
#define GEN_PASS_DEF_CONVERTKILNTOLLVM
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;

namespace {
struct ConvertKilnToLLVM
    : public kiln::impl::ConvertKilnToLLVMBase<ConvertKilnToLLVM> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (numStages < 2 || numStages > 8) {
      module.emitError("convert-kiln-to-llvm: num-stages must be in [2, 8], "
                       "got ")
          << int(numStages);
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> kernels;
    for (auto f : module.getOps<func::FuncOp>())
      kernels.push_back(f);
    int64_t shared = 0, conversions = 0, producerWarps = 0;
    bool persistent = false, tileCounter = false, overlapPrevious = false;
    SmallVector<Attribute> report, maps;
    for (func::FuncOp f : kernels) {
      auto warps = f->getAttrOfType<IntegerAttr>("kiln.num_warps");
      if (!warps) {
        f.emitError("convert-kiln-to-llvm: run kiln-assign-layouts first "
                    "(no kiln.num_warps)");
        return signalPassFailure();
      }
      try {
        auto lower = [&](kiln::gpu::Lowerer &lowerer) {
          lowerer.reloadThreadIds = reloadThreadIds;
          lowerer.invariantAInRegisters =
              f->hasAttr("kiln.invariant_a_in_registers");
          lowerer.sharedLimit = sharedLimit;
          lowerer.copyAddressesPerRegister =
              f->hasAttr("kiln.copy_addresses_per_register");
          lowerer.skipPassingMasks = f->hasAttr("kiln.skip_passing_masks");
          auto mma = f->getAttrOfType<StringAttr>("kiln.mma");
          bool wantWgmma = mma && mma.getValue() == "wgmma";
          lowerer.wgmma = wantWgmma && hasWgmma;
          lowerer.vectorAtomics = hasWgmma;
          lowerer.gridDependencyControl = hasWgmma;
          if (wantWgmma && !hasWgmma)
            lowerer.report.push_back(
                "schedule asks for wgmma; the target has none (sm_90a only): "
                "dots use mma.sync");
          lowerer.tma = f->hasAttr("kiln.tma") && lowerer.wgmma;
          if (f->hasAttr("kiln.tma") && !lowerer.wgmma)
            lowerer.report.push_back("schedule asks for TMA, which comes with "
                                     "wgmma only here: loads use cp.async");
          return lowerer.run(module);
        };
        std::unique_ptr<kiln::gpu::Lowerer> first;
        auto relower = [&](int64_t gatedFrom, int64_t retriedBytes,
                           bool tileLocal = false) {
          for (auto fn :
               llvm::make_early_inc_range(module.getOps<LLVM::LLVMFuncOp>()))
            if (fn.getName() == f.getName())
              fn.erase();
          first = std::make_unique<kiln::gpu::Lowerer>(f, int(warps.getInt()),
                                                       numStages);
          first->gatedFrom = gatedFrom;
          first->retriedBytes = retriedBytes;
          first->tileLocalCompute = tileLocal;
          return lower(*first);
        };
        int64_t bytes = relower(0, 0);
        // Persistent CTAs keep every buffer live across tiles. Where that
        // does not fit, or crowds out a TMA store's staging tile, the
        // producer waits for each tile's end instead and a tile's buffers
        // share bytes by liveness; kept only where it fits or keeps more
        // TMA stores (the wait costs the next tile's early fetches).
        if (!first->persistentGrid.empty() &&
            (bytes > sharedLimit || first->crowdedPeak)) {
          const bool fitted = bytes <= sharedLimit;
          const size_t stores = first->tmaStores.size();
          bytes = relower(std::max(bytes, first->crowdedPeak), 0);
          if (fitted && first->tmaStores.size() <= stores)
            bytes = relower(0, 0);
        }
        // A staged operand without its copies (a barrier in every
        // iteration) because persistent CTAs keep every buffer live: the
        // compute warps' own buffers by liveness within a tile instead,
        // kept where that fits and places more copies and no fewer TMA
        // stores.
        if (first->copiesCrowded) {
          const size_t copies = first->stagedCopies.size(),
                       stores = first->tmaStores.size();
          const int64_t gated = first->gatedFrom;
          int64_t local = relower(gated, 0, /*tileLocal=*/true);
          if (local <= sharedLimit &&
              first->stagedCopies.size() > copies &&
              first->tmaStores.size() >= stores)
            bytes = local;
          else
            bytes = relower(gated, 0);
        }
        // The TMA stores' staging tiles were placed before the scratch area
        // (conversions, reductions) was known: when the sum does not fit,
        // the kernel is lowered again with plain stores.
        if (bytes > sharedLimit && !first->tmaStores.empty())
          bytes = relower(first->gatedFrom, bytes);
        kiln::gpu::Lowerer &lowerer = *first;
        shared = std::max(shared, bytes);
        producerWarps = std::max<int64_t>(producerWarps, lowerer.producerWarps);
        persistent |= !lowerer.persistentGrid.empty();
        tileCounter |= lowerer.dynamicTiles;
        overlapPrevious |= lowerer.overlapPrevious;
        for (const kiln::TensorMapInfo &m : lowerer.tensorMaps)
          maps.push_back(StringAttr::get(module.getContext(), m.str()));
        conversions += lowerer.genericConversions;
        for (const std::string &line : lowerer.report)
          report.push_back(StringAttr::get(module.getContext(), line));
      } catch (const kiln::Error &e) { // unsupported input: the user's
        f.emitError(e.what());
        return signalPassFailure();
      } catch (const kiln::InternalError &e) { // a bug of kiln's
        f.emitError("internal error: ") << e.what();
        return signalPassFailure();
      }
      f.erase();
    }
    // Precise tanh, sin, cos, erf, exp and log left on f32 scalars: MLIR's
    // polynomial approximations (NVPTX has no instruction for them).
    // Only those ops are rewritten, and nothing is folded on the way: the
    // rest of the kernel stays as the lowering made it.
    SmallVector<Operation *> precise;
    module.walk([&](Operation *op) {
      if (isa<math::TanhOp, math::SinOp, math::CosOp, math::ErfOp, math::ExpOp,
              math::LogOp, math::Log2Op>(op))
        precise.push_back(op);
    });
    if (!precise.empty()) {
      RewritePatternSet patterns(module.getContext());
      populateMathPolynomialApproximationPatterns(patterns, [](StringRef name) {
        return llvm::is_contained({StringRef("math.tanh"),
                                   StringRef("math.sin"), StringRef("math.cos"),
                                   StringRef("math.erf"), StringRef("math.exp"),
                                   StringRef("math.log"),
                                   StringRef("math.log2")},
                                  name);
      });
      GreedyRewriteConfig config;
      config.enableFolding(false);
      config.setStrictness(GreedyRewriteStrictness::ExistingAndNewOps);
      if (failed(applyOpPatternsGreedily(precise, std::move(patterns), config)))
        return signalPassFailure();
    }
    Builder b(module.getContext());
    module->setAttr("kiln.shared_bytes", b.getI64IntegerAttr(shared));
    module->setAttr("kiln.smem_conversions", b.getI64IntegerAttr(conversions));
    module->setAttr("kiln.lowering_report", b.getArrayAttr(report));
    // TMA tensor maps the kernel takes after its own parameters, in order.
    // Warps the lowering adds to the kernel's own (a producer warpgroup).
    if (producerWarps)
      module->setAttr("kiln.producer_warps",
                      b.getI64IntegerAttr(producerWarps));
    // The launcher runs the grid's programs on as many CTAs as fit at once.
    if (persistent)
      module->setAttr("kiln.persistent", b.getUnitAttr());
    // Dynamic tiles: a tile counter after the tensor maps.
    if (tileCounter)
      module->setAttr("kiln.tile_counter", b.getUnitAttr());
    // Launched to start before the previous launch ends (sm_90).
    if (overlapPrevious)
      module->setAttr("kiln.overlap_previous", b.getUnitAttr());
    if (!maps.empty())
      module->setAttr("kiln.tensor_maps", b.getArrayAttr(maps));
  }
};
} // namespace
