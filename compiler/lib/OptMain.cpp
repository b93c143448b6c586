//===- OptMain.cpp - the kiln-opt driver ----------------------------------===//
#include "kiln/Compiler/OptMain.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int kiln::optMain(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registerKilnDialects(registry);
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "kiln optimizer driver\n", registry));
}
