//===- ConfigFlags.cpp - the attention configs' flags ---------------------===//
//
// The options that set the attention configs' fields, from the library's
// tables (kiln/kernels/AttentionFields.h): the forward's AttentionConfig
// (--block-m, --masked-first, ...) and the backward's
// AttentionBackwardConfig (--dq-warps, --persistent, ...), read by the
// commands that build them (kiln run, ptx, report, ...), by kiln bench
// attention [--backward] and by its --against items.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "kiln/kernels/AttentionFields.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <span>
#include <sstream>
#include <variant>

namespace kiln::cli {

namespace {

using kernels::AttentionBackwardConfig;
using kernels::AttentionConfig;

template <class Config> using ConfigFlag = kernels::AttentionField<Config>;
template <class Config> using Flags = std::span<const ConfigFlag<Config>>;
using kernels::FieldKind;

/// Sets f's field of `c` to `value` (from --name or an --against item named
/// `what`), refusing what the field's type cannot hold, a positive flag's
/// value below 1 and a switch's other than 0 or 1.
template <class Config>
void setField(const ConfigFlag<Config> &f, Config &c, int64_t value,
              const std::string &what) {
  std::visit(
      [&](auto member) {
        using T = std::remove_reference_t<decltype(c.*member)>;
        if (value < std::numeric_limits<T>::min() ||
            value > std::numeric_limits<T>::max())
          throw UsageError(what + " is out of range");
        if (f.kind == FieldKind::Positive && value < 1)
          throw UsageError(what + " must be >= 1, got " +
                           std::to_string(value));
        if (f.kind == FieldKind::Switch && value != 0 && value != 1)
          throw UsageError(what + " must be 0 or 1, got " +
                           std::to_string(value));
        c.*member = T(value);
      },
      f.member);
}

/// Each flag of `flags` given in `opts` sets its field of `c`.
template <class Config>
void readFlags(Options &opts, Flags<Config> flags, Config &c) {
  for (const ConfigFlag<Config> &f : flags)
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(c.*member)>;
          // Read in the field's range (the range's message names it); a
          // flag not given leaves the field as it is.
          constexpr int64_t kNotGiven = std::numeric_limits<int64_t>::min();
          const int64_t v = opts.integer(
              f.flag, kNotGiven,
              std::max<int64_t>(std::numeric_limits<T>::min(), kNotGiven + 1),
              std::numeric_limits<T>::max());
          if (v != kNotGiven)
            setField(f, c, v, "option --" + std::string(f.flag));
        },
        f.member);
}

/// `base` with the "flag=value ..." items of `text` (flags of `flags`) set.
template <class Config>
Config withItems(Config base, const std::string &text, Flags<Config> flags,
                 const char *which) {
  std::stringstream in(text);
  for (std::string item; in >> item;) {
    const auto eq = item.find('=');
    const std::string name = item.substr(0, eq);
    const ConfigFlag<Config> *f = nullptr;
    for (const ConfigFlag<Config> &g : flags)
      if (name == g.flag)
        f = &g;
    const std::string digits =
        eq == std::string::npos ? "" : item.substr(eq + 1);
    char *end = nullptr;
    errno = 0;
    const int64_t value = std::strtoll(digits.c_str(), &end, 10);
    if (!f || digits.empty() || *end || errno)
      throw UsageError("option --against: '" + item +
                       "' is not flag=integer with a flag of the " + which);
    setField(*f, base, value, "option --against: '" + item + "'");
  }
  return base;
}

/// One config per ';'-separated part of `text`, each `base` with that
/// part's items set ("" gives none).
template <class Config>
std::vector<Config> withItemsList(const Config &base, const std::string &text,
                                  Flags<Config> flags, const char *which) {
  std::vector<Config> out;
  if (text.empty())
    return out;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ';');) {
    if (part.find_first_not_of(" \t") == std::string::npos)
      throw UsageError("option --against: '" + text +
                       "' has an empty config between its ';'");
    out.push_back(withItems(base, part, flags, which));
  }
  if (text.back() == ';')
    throw UsageError("option --against: '" + text + "' ends in ';'");
  return out;
}

} // namespace

void forwardConfigFlags(Options &opts, AttentionConfig &c) {
  readFlags(opts, kernels::attentionConfigFields(), c);
}

std::string againstLabel(size_t which) {
  return which == 0   ? "default"
         : which == 1 ? "against"
                      : fmt::format("against{}", which);
}

std::vector<AttentionConfig> againstConfigs(const AttentionConfig &base,
                                            const std::string &text) {
  return withItemsList(base, text, kernels::attentionConfigFields(),
                       "forward's config (block-m, ragged-end-in-loop, ...)");
}

AttentionBackwardConfig backwardConfigOptions(Options &opts) {
  AttentionBackwardConfig c;
  readFlags(opts, kernels::attentionBackwardConfigFields(), c);
  return c;
}

std::vector<AttentionBackwardConfig>
againstBackwardConfigs(const AttentionBackwardConfig &base,
                       const std::string &text) {
  return withItemsList(base, text, kernels::attentionBackwardConfigFields(),
                       "backward's config (persistent, dq-warps, ...)");
}

} // namespace kiln::cli
