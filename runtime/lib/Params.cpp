//===- Params.cpp - tensor-map descriptions as text -----------------------===//
#include "kiln/runtime/Params.h"
#include "kiln/runtime/Error.h"

#include <sstream>

namespace kiln {

const char *scalarClassName(ScalarClass c) {
  switch (c) {
  case ScalarClass::One:
    return "one";
  case ScalarClass::DivisibleBy16:
    return "div16";
  case ScalarClass::Any:
    break;
  }
  return "any";
}

std::optional<ScalarClass> parseScalarClass(const std::string &name) {
  for (ScalarClass c :
       {ScalarClass::Any, ScalarClass::DivisibleBy16, ScalarClass::One})
    if (name == scalarClassName(c))
      return c;
  return std::nullopt;
}

ScalarClass scalarClassOf(int64_t value) {
  return value == 1        ? ScalarClass::One
         : value % 16 == 0 ? ScalarClass::DivisibleBy16
                           : ScalarClass::Any;
}

std::string joinInts(const std::vector<int64_t> &v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::vector<int64_t> splitInts(const std::string &s) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty())
      v.push_back(std::stoll(item));
  return v;
}

std::string TensorMapInfo::str() const {
  return "ptr=" + std::to_string(pointerParam) +
         " elem=" + std::to_string(elementBytes) + " dims=" + joinInts(dims) +
         " strides=" +
         joinInts(
             std::vector<int64_t>(strideParams.begin(), strideParams.end())) +
         " box=" + joinInts(box);
}

TensorMapInfo TensorMapInfo::parse(const std::string &text) {
  TensorMapInfo t;
  std::stringstream in(text);
  std::string field;
  bool ptr = false;
  try {
    while (in >> field) {
      size_t eq = field.find('=');
      if (eq == std::string::npos)
        throw Error("");
      std::string key = field.substr(0, eq), value = field.substr(eq + 1);
      if (key == "ptr")
        t.pointerParam = std::stoi(value), ptr = true;
      else if (key == "elem")
        t.elementBytes = std::stoi(value);
      else if (key == "dims")
        t.dims = splitInts(value);
      else if (key == "strides")
        for (int64_t s : splitInts(value))
          t.strideParams.push_back(int(s));
      else if (key == "box")
        t.box = splitInts(value);
      else
        throw Error("");
    }
  } catch (const std::exception &) {
    ptr = false;
  }
  if (!ptr || t.dims.empty() || t.dims.size() != t.strideParams.size() ||
      t.dims.size() != t.box.size())
    throw Error("tensor map: cannot parse '" + text + "'");
  return t;
}

} // namespace kiln
