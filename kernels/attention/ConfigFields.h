//===- ConfigFields.h - "name=value ..." text of a Config -------*- C++ -*-===//
//
// Internal to kernels/attention: the forward's and the backward's Configs
// are written to and read from the tuning database as "name=value" items,
// each name bound to an integer field of the Config; their switches are
// checked by AttentionFields.h's tables.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_KERNELS_ATTENTION_CONFIGFIELDS_H
#define KILN_KERNELS_ATTENTION_CONFIGFIELDS_H

#include "kiln/kernels/AttentionFields.h"
#include "kiln/runtime/Error.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace kiln::kernels {

/// Throws kiln::Error, prefixed with `what` ("attention"), naming the first
/// switch of `fields` (1 yes, 0 no, -1 the default) that holds another value
/// in `c`.
template <class Config>
void checkSwitches(const std::string &what, const Config &c,
                   std::span<const AttentionField<Config>> fields) {
  for (const AttentionField<Config> &f : fields)
    if (f.kind == FieldKind::Switch)
      std::visit(
          [&](auto member) {
            const int64_t value = c.*member;
            if (value < -1 || value > 1)
              throw Error(what + ": " + f.name +
                          " is 1 (yes), 0 (no) or -1 (the default), got " +
                          std::to_string(value));
          },
          f.member);
}

template <class Config>
using RecordField =
    std::pair<const char *, std::variant<int64_t Config::*, int Config::*>>;

/// Sets the named fields of a default Config from "name=value ..."; throws
/// kiln::Error, prefixed with `what` ("attention config"), naming the item.
template <class Config, size_t N>
Config parseConfigFields(const std::string &text,
                         const RecordField<Config> (&fields)[N],
                         const std::string &what) {
  Config c;
  std::stringstream in(text);
  for (std::string item; in >> item;) {
    auto eq = item.find('=');
    if (eq == std::string::npos)
      throw Error(what + " '" + text + "': '" + item + "' is not name=value");
    std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    char *end = nullptr;
    long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end)
      throw Error(what + ": " + name + "=" + value + " is not an integer");
    auto field = std::find_if(std::begin(fields), std::end(fields),
                              [&](const auto &f) { return name == f.first; });
    if (field == std::end(fields))
      throw Error(what + ": unknown field " + name);
    std::visit(
        [&](auto member) {
          c.*member = std::remove_reference_t<decltype(c.*member)>(v);
        },
        field->second);
  }
  return c;
}

} // namespace kiln::kernels

#endif // KILN_KERNELS_ATTENTION_CONFIGFIELDS_H
