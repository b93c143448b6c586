//===- Params.h - kernel parameters and argument values ---------*- C++ -*-===//
#ifndef KILN_RUNTIME_PARAMS_H
#define KILN_RUNTIME_PARAMS_H

#include "kiln/runtime/DType.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln {

/// What a compile assumed of a run-time integer argument's value (Triton's
/// specialisation classes): nothing, divisible by 16, or exactly 1.
enum class ScalarClass { Any, DivisibleBy16, One };
/// "any", "div16", "one"; and back (nullopt for any other text).
const char *scalarClassName(ScalarClass c);
std::optional<ScalarClass> parseScalarClass(const std::string &name);
/// The class of `value`: One, DivisibleBy16 (0 included) or Any.
ScalarClass scalarClassOf(int64_t value);

/// One parameter of a kernel function, in order.
struct ParamInfo {
  enum class Kind { Pointer, Scalar };
  std::string name;
  Kind kind;
  DType dtype; ///< pointee type for pointers, the value's type for scalars
  /// Scalars: what the compile assumed of the value; the launcher checks it.
  ScalarClass assumed = ScalarClass::Any;
  /// Scalars: a multiple the kernel itself was built for
  /// (KernelBuilder::scalarArg's multipleOf); bind and the launcher check it.
  int64_t multipleOf = 1;
  /// Scalars: another integer parameter this one must be at least
  /// (KernelBuilder::requireAtLeast); bind checks it. -1: none.
  int atLeastParam = -1;
  /// Scalars: another integer parameter this one must be productFactor
  /// times (KernelBuilder::requireProduct); bind checks it. -1: none.
  int productParam = -1;
  int64_t productFactor = 1;
};

/// A tensor argument: one pointer parameter plus one stride parameter per
/// dimension. Each dimension is compiled in, or read at run time from an
/// integer parameter (KernelBuilder::scalarArg): then `shape` holds
/// kDynamicDim there and `dimParams` the parameter's index.
inline constexpr int64_t kDynamicDim = -1;
struct TensorParamInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  int pointerParam;
  std::vector<int> strideParams;
  /// Compiled for a 16-byte aligned base, a contiguous last dimension and
  /// other strides that are multiples of 16 bytes (GpuTarget::assumeAligned):
  /// the launcher checks that at each launch.
  bool aligned = false;
  /// False where the kernel asked for one variant whatever the tensor's
  /// alignment (KernelBuilder::keepUnspecialised): never compiled as
  /// aligned, and its element accesses are no fallback.
  bool specialisable = true;
  /// The kernel requires a contiguous last dimension (stride 1) whatever its
  /// specialisation (KernelBuilder::requireContiguous): bind and the
  /// launcher refuse other strides.
  bool contiguous = false;
  /// Per dimension: the integer parameter that holds it, or -1 (compiled
  /// in). Empty: every dimension is compiled in.
  std::vector<int> dimParams;
};

/// A TMA tensor map the kernel takes after its parameters, as a 128-byte
/// grid-constant parameter: the launcher encodes it (cuTensorMapEncodeTiled)
/// from the pointer and stride arguments it names. Dimensions run outermost
/// first; the innermost one must have stride 1. Boxes land in shared memory
/// with the 128-byte swizzle; elements outside `dims` read as zero.
struct TensorMapInfo {
  int pointerParam = 0;
  int elementBytes = 2;
  std::vector<int64_t> dims; ///< kDynamicDim where dimParams names one
  /// Per dimension, the integer parameter read at launch for a run-time
  /// dimension, else -1; empty when every dimension is compiled in.
  std::vector<int> dimParams;
  std::vector<int> strideParams; ///< in elements, one per dimension
  std::vector<int64_t> box;      ///< elements per dimension of one copy
  /// "ptr=0 elem=2 dims=2,8,300,128 strides=1,2,3,4 box=1,1,64,64", with
  /// " dimparams=-1,-1,5,-1" when a dimension is read at run time
  std::string str() const;
  /// Parses str()'s form; throws kiln::Error on anything else.
  static TensorMapInfo parse(const std::string &text);
};

/// "1,2,3" and back: the text form of integer lists in kernel metadata
/// (tensor maps here, the compiler's cache entries). splitInts skips empty
/// items and throws std::logic_error (std::stoll's) on anything else.
std::string joinInts(const std::vector<int64_t> &v);
std::vector<int64_t> splitInts(const std::string &s);

/// A value for one parameter: a pointer (host or device), an integer, or a
/// float.
using ArgValue = std::variant<void *, int64_t, double>;

/// The number of programs along one axis of a launch grid: a constant, or
/// evaluated at each launch from the kernel's integer arguments as
/// scale x prod(ceil(args[param] / divisor)) (what cdiv(N, 128) * H in the
/// DSL builds from run-time integers).
struct GridExtent {
  struct Factor {
    int param;
    int64_t divisor = 1;
    bool operator==(const Factor &) const = default;
  };
  int64_t scale = 1;
  std::vector<Factor> factors;

  GridExtent(int64_t constant = 1) : scale(constant) {}
  bool isConstant() const { return factors.empty(); }
  bool operator==(const GridExtent &) const = default;
  /// Throws kiln::Error when an argument it reads is not an integer or the
  /// product overflows.
  int64_t evaluate(const std::vector<ArgValue> &args) const;
  /// "128", "2*cdiv(#3,128)*#4" (parameter indices); parse() reads it back
  /// and throws kiln::Error on anything else.
  std::string str() const;
  static GridExtent parse(const std::string &text);
  /// The same with parameter names: "2*cdiv(Nq,128)*H".
  std::string describe(const std::vector<ParamInfo> &params) const;
};
using GridExtents = std::array<GridExtent, 3>;
/// Each extent for an argument list; throws kiln::Error naming the kernel
/// and the extent when one is < 1.
std::array<int64_t, 3> evaluateGrid(const GridExtents &grid,
                                    const std::vector<ParamInfo> &params,
                                    const std::vector<ArgValue> &args,
                                    const std::string &kernel);
/// Whether a kernel that is not persistent folds its grid's y: a run-time y
/// beside a z of 1, which it reads as blockIdx.y + gridDim.y * blockIdx.z
/// (returning past y), so that the launcher may split a y past the device's
/// 65535 across y and z. The compiler and the launcher both ask this.
bool foldsGridY(const GridExtents &grid);
/// "x=cdiv(Nq,128) y=B*H z=1" (or "8 x 32 x 1" when constant).
std::string describeGrid(const GridExtents &grid,
                         const std::vector<ParamInfo> &params);

} // namespace kiln

#endif // KILN_RUNTIME_PARAMS_H
