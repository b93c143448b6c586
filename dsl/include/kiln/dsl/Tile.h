//===- Tile.h - the DSL's values: Index, Tile and their ops -----*- C++ -*-===//
//
// Index (an i32 scalar of the kernel) and Tile (a block of values in
// registers or shared memory, as the compiler decides), with elementwise,
// math, creation, shape, reduction and dot ops. Part of Dsl.h.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DSL_TILE_H
#define KILN_DSL_TILE_H

#include "kiln/runtime/DType.h"
#include "kiln/runtime/Error.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

namespace kiln::dsl {

using Loc = std::source_location;
using Shape = std::vector<int64_t>;
using kiln::DType;
inline constexpr DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16,
                       i32 = DType::i32, i1 = DType::i1;
inline constexpr double inf = __builtin_inf();
inline constexpr double log2e = 1.4426950408889634;
inline constexpr double ln2 = 0.6931471805599453;

constexpr int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// An i32 scalar computed in the kernel (a program id, an offset). Built from
/// an integer it is a constant, and arithmetic on constants folds in C++.
class Index {
public:
  Index(int64_t constant, Loc loc = Loc::current());
  bool isConstant() const { return constant_.has_value(); }
  int64_t constant() const { return *constant_; }
  void *raw() const;
  /// For a constant, a run-time integer argument, and products and cdivs by
  /// constants of them: the host-side formula (what a launch grid's extent
  /// may be); nullopt for anything the host cannot evaluate.
  const std::optional<GridExtent> &extent() const { return extent_; }
  /// The KernelBuilder (a number per builder) that made it; 0 for a
  /// constant, which serves any kernel.
  uint64_t kernelSerial() const { return constant_ ? 0 : kernel_; }

  static Index fromRaw(void *value, std::optional<int64_t> constant,
                       std::optional<GridExtent> extent = std::nullopt);

private:
  Index() = default;
  void *value_ = nullptr; // materialised lazily for constants
  uint64_t kernel_ = 0;   // the KernelBuilder that made value_
  std::optional<int64_t> constant_;
  std::optional<GridExtent> extent_;
  Loc loc_;
};

/// An Index operand that remembers the line it was written on.
struct IndexArg {
  IndexArg(Index v, Loc l = Loc::current()) : value(v), loc(l) {}
  IndexArg(int64_t c, Loc l = Loc::current()) : value(c, l), loc(l) {}
  Index value;
  Loc loc;
};

Index operator+(const Index &a, IndexArg b);
Index operator-(const Index &a, IndexArg b);
Index operator*(const Index &a, IndexArg b);
Index operator/(const Index &a, IndexArg b); ///< rounds toward zero
Index operator%(const Index &a, IndexArg b);
Index operator+(int64_t a, IndexArg b);
Index operator-(int64_t a, IndexArg b);
Index operator*(int64_t a, IndexArg b);
Index min(Index a, Index b, Loc loc = Loc::current());
Index max(Index a, Index b, Loc loc = Loc::current());
Index cdiv(Index a, Index b, Loc loc = Loc::current());

/// A tile: a value of static shape and one element type.
class Tile {
public:
  Tile() = default;
  Shape shape() const;
  DType dtype() const;
  int64_t rank() const { return int64_t(shape().size()); }
  /// Element type conversion (rounds to nearest even).
  Tile to(DType dtype, Loc loc = Loc::current()) const;
  /// Its IR value; throws kiln::Error when the tile was made while another
  /// kernel was built (a Tile lives as long as its KernelBuilder).
  void *raw() const;
  bool valid() const { return value_ != nullptr; }
  /// The KernelBuilder (a number per builder) that made it; 0 when empty.
  uint64_t kernelSerial() const { return kernel_; }

  static Tile fromRaw(void *value);

private:
  void *value_ = nullptr;
  uint64_t kernel_ = 0;
};

/// One operand of a tile operator: a tile, a number (splat to the other
/// operand's dtype) or an Index (splat as i32). It records the user's line.
struct TileArg {
  TileArg(const Tile &t, Loc l = Loc::current()) : tile(t), loc(l) {}
  template <class T>
  requires std::is_arithmetic_v<T> TileArg(T s, Loc l = Loc::current())
      : number(double(s)), loc(l) {}
  TileArg(const Index &i, Loc l = Loc::current()) : index(i), loc(l) {}
  std::optional<Tile> tile;
  std::optional<double> number;
  std::optional<Index> index;
  Loc loc;
};

// Elementwise arithmetic. Operands of rank r broadcast along their size-1
// dimensions (an Mx1 column against an MxN tile); ranks must be equal.
Tile operator+(TileArg a, TileArg b);
Tile operator-(TileArg a, TileArg b);
Tile operator*(TileArg a, TileArg b);
Tile operator/(TileArg a, TileArg b);
Tile operator%(TileArg a, TileArg b); ///< remainder, sign of the dividend
Tile operator<(TileArg a, TileArg b);
Tile operator<=(TileArg a, TileArg b);
Tile operator>(TileArg a, TileArg b);
Tile operator>=(TileArg a, TileArg b);
Tile operator==(TileArg a, TileArg b);
Tile operator!=(TileArg a, TileArg b);
Tile operator&&(TileArg a, TileArg b);
Tile operator||(TileArg a, TileArg b);
// Integer (and mask) tiles only: bitwise and, or, xor; shifts (>> keeps the
// sign). A shift count outside [0, bits) gives an unspecified value.
Tile operator&(TileArg a, TileArg b);
Tile operator|(TileArg a, TileArg b);
Tile operator^(TileArg a, TileArg b);
Tile operator<<(TileArg a, TileArg b);
Tile operator>>(TileArg a, TileArg b);
Tile max(TileArg a, TileArg b, Loc loc = Loc::current());
Tile min(TileArg a, TileArg b, Loc loc = Loc::current());
/// cond ? a : b elementwise; cond is an i1 tile.
Tile where(TileArg cond, TileArg a, TileArg b, Loc loc = Loc::current());
Tile neg(const Tile &x, Loc loc = Loc::current());
Tile exp(const Tile &x, Loc loc = Loc::current());
Tile exp2(const Tile &x, Loc loc = Loc::current());
Tile log(const Tile &x, Loc loc = Loc::current());
Tile log2(const Tile &x, Loc loc = Loc::current());
Tile sqrt(const Tile &x, Loc loc = Loc::current());
Tile abs(const Tile &x, Loc loc = Loc::current()); ///< float or integer
Tile floor(const Tile &x, Loc loc = Loc::current());
Tile erf(const Tile &x, Loc loc = Loc::current()); ///< polynomial, ~1e-7

/// Transcendental functions, computed in fp32: Fast takes the GPU's
/// approximate instructions (tanh.approx, sin.approx, cos.approx,
/// rsqrt.approx; ex2/lg2.approx for pow, |error| about 1e-3 for tanh and
/// 1e-6 for the others), Precise a polynomial (tanh, sin, cos), an IEEE
/// square root and division (rsqrt), a few ulps. The CPU executor computes
/// both in full precision.
enum class MathMode { Fast, Precise };
Tile tanh(const Tile &x, MathMode mode = MathMode::Fast,
          Loc loc = Loc::current());
/// 1 / (1 + e^-x); Fast: 0.5·tanh.approx(x/2) + 0.5.
Tile sigmoid(const Tile &x, MathMode mode = MathMode::Fast,
             Loc loc = Loc::current());
Tile sin(const Tile &x, MathMode mode = MathMode::Fast,
         Loc loc = Loc::current());
Tile cos(const Tile &x, MathMode mode = MathMode::Fast,
         Loc loc = Loc::current());
Tile rsqrt(const Tile &x, MathMode mode = MathMode::Fast,
           Loc loc = Loc::current());
/// x^y elementwise for x > 0 (NaN for x < 0, as exp2(y·log2(x))); y may be
/// a number. Fast: ex2/lg2.approx; Precise: polynomial exp and log.
Tile pow(const Tile &x, TileArg y, Loc loc = Loc::current());
Tile pow(const Tile &x, TileArg y, MathMode mode, Loc loc = Loc::current());
/// exp, exp2, log, log2 in a mode: the one-argument forms above are Fast
/// (ex2.approx / lg2.approx, what attention's softmax takes); Precise: MLIR's
/// polynomial approximations in f32, a few ulps.
Tile exp(const Tile &x, MathMode mode, Loc loc = Loc::current());
Tile exp2(const Tile &x, MathMode mode, Loc loc = Loc::current());
Tile log(const Tile &x, MathMode mode, Loc loc = Loc::current());
Tile log2(const Tile &x, MathMode mode, Loc loc = Loc::current());

// Creation.
Tile full(const Shape &shape, double value, DType dtype,
          Loc loc = Loc::current());
Tile zeros(const Shape &shape, DType dtype, Loc loc = Loc::current());
/// 0, 1, ..., n-1 as i32.
Tile arange(int64_t n, Loc loc = Loc::current());
Tile splat(Index value, const Shape &shape, Loc loc = Loc::current());

// Shape.
Tile expandDims(const Tile &x, int64_t axis, Loc loc = Loc::current());
/// A vector of M elements as an Mx1 column (x[:, None]).
Tile column(const Tile &x, Loc loc = Loc::current());
/// A vector of N elements as a 1xN row (x[None, :]).
Tile row(const Tile &x, Loc loc = Loc::current());
Tile broadcastTo(const Tile &x, const Shape &shape, Loc loc = Loc::current());
/// Reverses the two dimensions of a 2-D tile.
Tile transpose(const Tile &x, Loc loc = Loc::current());
Tile permute(const Tile &x, const std::vector<int32_t> &order,
             Loc loc = Loc::current());

// Reductions along one axis.
Tile reduceSum(const Tile &x, int64_t axis, Loc loc = Loc::current());
Tile reduceMax(const Tile &x, int64_t axis, Loc loc = Loc::current());
Tile reduceMin(const Tile &x, int64_t axis, Loc loc = Loc::current());

/// a·b (+ acc) with fp32 accumulation: a is MxK, b is KxN, both bf16, f16 or
/// f32; the result is MxN f32.
Tile dot(const Tile &a, const Tile &b, Loc loc = Loc::current());
Tile dot(const Tile &a, const Tile &b, const Tile &acc,
         Loc loc = Loc::current());

} // namespace kiln::dsl

#endif // KILN_DSL_TILE_H
