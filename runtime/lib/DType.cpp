//===- DType.cpp - element types and their rounding -----------------------===//
#include "kiln/runtime/DType.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace kiln {

const char *dtypeName(DType t) {
  switch (t) {
  case DType::f32:
    return "f32";
  case DType::f16:
    return "f16";
  case DType::bf16:
    return "bf16";
  case DType::i1:
    return "i1";
  case DType::i32:
    return "i32";
  case DType::i64:
    return "i64";
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view n) {
  if (n == "f32" || n == "fp32" || n == "float")
    return DType::f32;
  if (n == "f16" || n == "fp16" || n == "half")
    return DType::f16;
  if (n == "bf16")
    return DType::bf16;
  if (n == "i1" || n == "bool")
    return DType::i1;
  if (n == "i32")
    return DType::i32;
  if (n == "i64")
    return DType::i64;
  return std::nullopt;
}

size_t dtypeSize(DType t) {
  switch (t) {
  case DType::f16:
  case DType::bf16:
    return 2;
  case DType::i1:
    return 1;
  case DType::f32:
  case DType::i32:
    return 4;
  case DType::i64:
    return 8;
  }
  return 0;
}

bool isFloat(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

uint16_t floatToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f))
    return uint16_t((u >> 16) | 0x40);          // keep it a (quiet) NaN
  uint32_t rounding = 0x7FFF + ((u >> 16) & 1); // nearest, ties to even
  return uint16_t((u + rounding) >> 16);
}

float bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(uint32_t(b) << 16);
}

uint16_t floatToHalf(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t absu = u & 0x7FFFFFFF;
  if (absu > 0x7F800000) // NaN
    return uint16_t(sign | 0x7E00);
  if (absu >= 0x477FF000) // rounds to >= 65520: infinity
    return uint16_t(sign | 0x7C00);
  if (absu < 0x38800000) { // below the smallest normal half: subnormal or 0
    // Scale so that the half subnormal step (2^-24) becomes 1 and let the FPU
    // round to nearest even.
    float scaled = std::bit_cast<float>(absu) * 16777216.0f; // 2^24
    return uint16_t(sign | uint32_t(std::nearbyint(scaled)));
  }
  uint32_t mant = absu & 0x7FFFFF;
  uint32_t exp = (absu >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    ++h; // may carry into the exponent, which is the right answer
  return uint16_t(sign | h);
}

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  if (exp == 0) // zero or subnormal: mant * 2^-24
    return std::bit_cast<float>(sign) +
           (sign ? -1.0f : 1.0f) * float(mant) * 5.9604644775390625e-8f;
  if (exp == 31)
    return std::bit_cast<float>(sign | 0x7F800000 | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

float roundTo(DType t, float f) {
  switch (t) {
  case DType::bf16:
    return bf16ToFloat(floatToBf16(f));
  case DType::f16:
    return halfToFloat(floatToHalf(f));
  default:
    return f;
  }
}

} // namespace kiln
