//===- OptMain.cpp - the kiln-opt driver ----------------------------------===//
#include "kiln/Compiler/OptMain.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int kiln::optMain(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registerKilnDialects(registry);
  registry.insert<mlir::LLVM::LLVMDialect, mlir::NVVM::NVVMDialect>();
  registerKilnPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "kiln optimizer driver\n", registry));
}
