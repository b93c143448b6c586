//===- DType.h - element types and their rounding ---------------*- C++ -*-===//
#ifndef KILN_RUNTIME_DTYPE_H
#define KILN_RUNTIME_DTYPE_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType : uint8_t { f32, f16, bf16, i1, i32, i64 };

const char *dtypeName(DType t);
/// Accepts the names dtypeName gives plus "fp32", "fp16", "half", "float".
std::optional<DType> parseDType(std::string_view name);
size_t dtypeSize(DType t);
bool isFloat(DType t);

/// IEEE binary16 and bfloat16 conversions; float to narrow rounds to nearest
/// even, NaN stays NaN, overflow goes to infinity.
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBf16(float f);
float bf16ToFloat(uint16_t b);

/// Rounds f to the nearest value representable in t (a float type).
float roundTo(DType t, float f);

} // namespace kiln

#endif // KILN_RUNTIME_DTYPE_H
