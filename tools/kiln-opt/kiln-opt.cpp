//===- kiln-opt.cpp - run kiln passes over .mlir files (for lit tests) ----===//
#include "kiln/Compiler/OptMain.h"

int main(int argc, char **argv) { return kiln::optMain(argc, argv); }
