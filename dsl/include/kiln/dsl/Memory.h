//===- Memory.h - the DSL's tensors, blocks and loops -----------*- C++ -*-===//
//
// TensorView (a global tensor through a pointer, a shape and strides),
// Block (a tile-shaped part of it), loads, stores and atomics; counted
// loops carrying tiles. Part of Dsl.h.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DSL_MEMORY_H
#define KILN_DSL_MEMORY_H

#include "kiln/dsl/Tile.h"

#include <functional>

namespace kiln::dsl {

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
  /// The view of the first n entries of dimension 0 (0 <= n <= its
  /// extent; n may be read at run time): blocks past them load padding and
  /// store nothing, as past the tensor's end. A per-sequence length within
  /// a padded tensor (a KV cache's filled slots). Loads of such a view do
  /// not go through TMA, whose bounds are the tensor's (the lowering report
  /// says so): take whole blocks known to lie inside from the full view.
  TensorView firstRows(Index n, Loc loc = Loc::current()) const;
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

} // namespace kiln::dsl

#endif // KILN_DSL_MEMORY_H
