//===- OptMain.h - the kiln-opt driver --------------------------*- C++ -*-===//
#ifndef KILN_COMPILER_OPTMAIN_H
#define KILN_COMPILER_OPTMAIN_H

namespace kiln {
/// mlir-opt with the kiln dialects and passes registered. It lives in libkiln
/// so that the kiln-opt executable links no MLIR of its own.
int optMain(int argc, char **argv);
} // namespace kiln

#endif // KILN_COMPILER_OPTMAIN_H
