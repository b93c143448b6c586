//===- Kernel.h - a built kiln kernel and its metadata ----------*- C++ -*-===//
//
// What the DSL hands to the compiler and the executors: the kernel's kiln IR
// (held behind a pointer so that this header needs no MLIR) and the metadata a
// launcher needs: name, parameters, grid.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_COMPILER_KERNEL_H
#define KILN_COMPILER_KERNEL_H

#include "kiln/runtime/DType.h"
#include "kiln/runtime/HostTensor.h"
#include "kiln/runtime/Params.h"

#include <array>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace kiln {

class Kernel {
public:
  struct Impl;
  explicit Kernel(std::shared_ptr<Impl> impl);

  const std::string &name() const;
  const std::vector<ParamInfo> &params() const;
  const std::vector<TensorParamInfo> &tensors() const;
  /// The tensors of `all` that this kernel takes (by name), for bind, which
  /// refuses names a kernel does not have: kernels launched in sequence can
  /// each take theirs from one map.
  std::map<std::string, TensorRef>
  tensorsIn(const std::map<std::string, TensorRef> &all) const;
  /// Programs along x, y, z: constants, or products of run-time integers
  /// (KernelBuilder::setGrid) evaluated at each launch.
  const GridExtents &grid() const;
  /// The grid's extents for an argument list (bind's); throws kiln::Error
  /// naming the extent when one is < 1.
  std::array<int64_t, 3> gridFor(const std::vector<ArgValue> &args) const;
  /// Warps per program (the Config's choice).
  int numWarps() const;
  /// The kiln IR as text, with source locations when `withLocations`.
  std::string ir(bool withLocations = false) const;
  /// Throws kiln::Error naming the user's line when a tile dimension is not
  /// a power of two (layouts spread tiles bit by bit on the GPU) or a dot's
  /// shape is not in multiples of 16x8x16 (the tensor cores'): the CPU
  /// executor and the GPU compile both check, so that a kernel tried on the
  /// CPU runs on the GPU too.
  void checkTileShapes() const;

  /// The argument list for a launch: each tensor parameter bound by name to a
  /// tensor of the same dtype and shape, strides checked against the index
  /// width, and each run-time integer (KernelBuilder::scalarArg) to its value
  /// in `scalars`. Throws kiln::Error naming the tensor or argument on any
  /// mismatch.
  std::vector<ArgValue>
  bind(const std::map<std::string, TensorRef> &tensors,
       const std::map<std::string, int64_t> &scalars = {}) const;

  Impl &impl() const { return *impl_; }

private:
  std::shared_ptr<Impl> impl_;
};

/// Parses and verifies kiln IR text; returns the diagnostics, empty when the
/// module is valid.
std::string verifyModuleText(const std::string &text);

} // namespace kiln

#endif // KILN_COMPILER_KERNEL_H
