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

#include "kiln/dsl/KernelBuilder.h" // IWYU pragma: export
#include "kiln/dsl/Memory.h"        // IWYU pragma: export
#include "kiln/dsl/Tile.h"          // IWYU pragma: export

#endif // KILN_DSL_DSL_H
