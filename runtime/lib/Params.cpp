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
         " box=" + joinInts(box) +
         (dimParams.empty()
              ? std::string()
              : " dimparams=" + joinInts(std::vector<int64_t>(
                                    dimParams.begin(), dimParams.end())));
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
      else if (key == "dimparams")
        for (int64_t p : splitInts(value))
          t.dimParams.push_back(int(p));
      else
        throw Error("");
    }
  } catch (const std::exception &) {
    ptr = false;
  }
  if (!ptr || t.dims.empty() || t.dims.size() != t.strideParams.size() ||
      t.dims.size() != t.box.size() ||
      (!t.dimParams.empty() && t.dimParams.size() != t.dims.size()))
    throw Error("tensor map: cannot parse '" + text + "'");
  return t;
}

int64_t GridExtent::evaluate(const std::vector<ArgValue> &args) const {
  int64_t n = scale;
  for (const Factor &f : factors) {
    const int64_t *v = f.param >= 0 && size_t(f.param) < args.size()
                           ? std::get_if<int64_t>(&args[size_t(f.param)])
                           : nullptr;
    if (!v)
      throw Error("grid extent " + str() + ": argument #" +
                  std::to_string(f.param) + " is not an integer");
    int64_t q = *v <= 0 ? 0 : (*v + f.divisor - 1) / f.divisor;
    if (__builtin_mul_overflow(n, q, &n))
      throw Error("grid extent " + str() + " overflows 64-bit integers");
  }
  return n;
}

static std::string factorText(const GridExtent::Factor &f,
                              const std::string &name) {
  return f.divisor == 1
             ? name
             : "cdiv(" + name + "," + std::to_string(f.divisor) + ")";
}

std::string GridExtent::str() const {
  std::string s = std::to_string(scale);
  if (scale == 1 && !factors.empty())
    s.clear();
  for (const Factor &f : factors)
    s += (s.empty() ? "" : "*") + factorText(f, "#" + std::to_string(f.param));
  return s;
}

std::string GridExtent::describe(const std::vector<ParamInfo> &params) const {
  std::string s = scale == 1 && !factors.empty() ? "" : std::to_string(scale);
  for (const Factor &f : factors)
    s += (s.empty() ? "" : "*") +
         factorText(f, size_t(f.param) < params.size()
                           ? params[size_t(f.param)].name
                           : "#" + std::to_string(f.param));
  return s;
}

GridExtent GridExtent::parse(const std::string &text) {
  GridExtent g(1);
  auto bad = [&] { return Error("grid extent: cannot parse '" + text + "'"); };
  std::stringstream in(text);
  std::string item;
  bool any = false;
  try {
    while (std::getline(in, item, '*')) {
      any = true;
      if (item.rfind("cdiv(#", 0) == 0 && item.back() == ')') {
        size_t comma = item.find(',');
        if (comma == std::string::npos)
          throw bad();
        g.factors.push_back({std::stoi(item.substr(6, comma - 6)),
                             std::stoll(item.substr(comma + 1))});
        if (g.factors.back().divisor < 1)
          throw bad();
      } else if (item.rfind("#", 0) == 0) {
        g.factors.push_back({std::stoi(item.substr(1)), 1});
      } else {
        size_t used = 0;
        g.scale *= std::stoll(item, &used);
        if (used != item.size())
          throw bad();
      }
    }
  } catch (const std::logic_error &) {
    throw bad();
  }
  if (!any)
    throw bad();
  return g;
}

std::array<int64_t, 3> evaluateGrid(const GridExtents &grid,
                                    const std::vector<ParamInfo> &params,
                                    const std::vector<ArgValue> &args,
                                    const std::string &kernel) {
  std::array<int64_t, 3> g;
  for (int a = 0; a < 3; ++a) {
    g[a] = grid[a].evaluate(args);
    if (g[a] < 1)
      throw Error("kernel " + kernel + ": grid extent " +
                  std::string(1, char('x' + a)) + " = " +
                  grid[a].describe(params) + " is " + std::to_string(g[a]) +
                  " (an empty launch)");
  }
  return g;
}

bool foldsGridY(const GridExtents &grid) {
  return !grid[1].isConstant() && grid[2].isConstant() && grid[2].scale == 1;
}

std::string describeGrid(const GridExtents &grid,
                         const std::vector<ParamInfo> &params) {
  bool constant = true;
  for (const GridExtent &g : grid)
    constant &= g.isConstant();
  if (constant)
    return std::to_string(grid[0].scale) + " x " +
           std::to_string(grid[1].scale) + " x " +
           std::to_string(grid[2].scale);
  return "x=" + grid[0].describe(params) + " y=" + grid[1].describe(params) +
         " z=" + grid[2].describe(params);
}

} // namespace kiln
