//===- ConfigFlags.cpp - the attention configs' flags ---------------------===//
//
// A table per config of the options that set its fields: the forward's
// kernels::AttentionConfig (--block-m, --masked-first, ...) and the
// backward's kernels::AttentionBackwardConfig (--dq-warps, --persistent,
// ...), read by the commands that build them (kiln run, ptx, report, ...),
// by kiln bench attention [--backward] and by its --against items.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "kiln/kernels/Attention.h"
#include "kiln/kernels/AttentionBackward.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <sstream>
#include <variant>

namespace kiln::cli {

namespace {

using kernels::AttentionBackwardConfig;
using kernels::AttentionConfig;

template <class Config> struct ConfigFlag {
  const char *name;
  std::variant<int64_t Config::*, int Config::*> field;
  bool positive = false; ///< a tile or a stage count: >= 1
};
using ForwardFlag = ConfigFlag<AttentionConfig>;
using BackwardFlag = ConfigFlag<AttentionBackwardConfig>;

const ForwardFlag kForwardFlags[] = {
    {"block-m", &AttentionConfig::blockM, true},
    {"block-n", &AttentionConfig::blockN, true},
    {"warps", &AttentionConfig::warps},
    {"stages", &AttentionConfig::stages, true},
    {"reload-ids", &AttentionConfig::reloadThreadIds},
    {"block-n-diagonal", &AttentionConfig::blockNDiagonal},
    {"block-n-ragged-end", &AttentionConfig::blockNRaggedEnd},
    {"ragged-end-in-loop", &AttentionConfig::raggedEndInLoop},
    {"masked-first", &AttentionConfig::maskedBlockFirst},
    {"align-rows-to-end", &AttentionConfig::alignRowsToEnd},
    {"narrow-in-diagonal", &AttentionConfig::narrowStepInDiagonal},
    {"copy-per-register", &AttentionConfig::copyAddressesPerRegister},
    {"longest-first-globally", &AttentionConfig::longestFirstGlobally},
    {"head-group", &AttentionConfig::headGroup},
    {"dynamic-tiles", &AttentionConfig::dynamicTiles},
    {"wgmma", &AttentionConfig::wgmma},
    {"tma", &AttentionConfig::tma},
    {"tma-store", &AttentionConfig::tmaStore},
    {"skip-dead-rows", &AttentionConfig::skipDeadRows},
    {"one-shot-loads", &AttentionConfig::oneShotLoads},
    {"warp-specialize", &AttentionConfig::warpSpecialize},
    {"pingpong", &AttentionConfig::pingpong},
    {"overlap", &AttentionConfig::overlap},
    {"peel-first", &AttentionConfig::peelFirstStep},
    {"persistent", &AttentionConfig::persistent},
    {"min-blocks-per-sm", &AttentionConfig::minBlocksPerSM},
    {"split-keys", &AttentionConfig::splitKeys},
    {"small-tiles", &AttentionConfig::smallTiles}};

const BackwardFlag kBackwardFlags[] = {
    {"block-m", &AttentionBackwardConfig::blockM},
    {"block-n", &AttentionBackwardConfig::blockN},
    {"dq-block-m", &AttentionBackwardConfig::dqBlockM},
    {"dq-block-n", &AttentionBackwardConfig::dqBlockN},
    {"warps", &AttentionBackwardConfig::warps},
    {"dq-warps", &AttentionBackwardConfig::dqWarps},
    {"stages", &AttentionBackwardConfig::stages, true},
    {"pingpong", &AttentionBackwardConfig::pingpong},
    {"overlap", &AttentionBackwardConfig::overlap},
    {"min-blocks-per-sm", &AttentionBackwardConfig::minBlocksPerSM},
    {"wgmma", &AttentionBackwardConfig::wgmma},
    {"tma", &AttentionBackwardConfig::tma},
    {"warp-specialize", &AttentionBackwardConfig::warpSpecialize},
    {"static-shapes", &AttentionBackwardConfig::staticShapes},
    {"separate-dk-dv", &AttentionBackwardConfig::separateDkDv},
    {"deterministic", &AttentionBackwardConfig::deterministic},
    {"reload-ids", &AttentionBackwardConfig::reloadThreadIds},
    {"persistent", &AttentionBackwardConfig::persistent},
    {"dynamic-tiles", &AttentionBackwardConfig::dynamicTiles},
    {"longest-first-globally", &AttentionBackwardConfig::longestFirst},
    {"kv-in-registers", &AttentionBackwardConfig::kvInRegisters},
    {"scores-by-queries", &AttentionBackwardConfig::scoresByQueries},
    {"fold-statistics", &AttentionBackwardConfig::foldStatistics},
    {"tma-store", &AttentionBackwardConfig::tmaStore},
    {"convert-dq-last", &AttentionBackwardConfig::convertDqLast},
    {"overlap-dq-convert", &AttentionBackwardConfig::overlapDqConvert},
    {"head-group", &AttentionBackwardConfig::headGroup}};

/// Sets f's field of `c` to `value` (from --name or an --against item named
/// `what`), refusing what the field's type cannot hold or a positive flag's
/// value below 1.
template <class Config>
void setField(const ConfigFlag<Config> &f, Config &c, int64_t value,
              const std::string &what) {
  std::visit(
      [&](auto member) {
        using T = std::remove_reference_t<decltype(c.*member)>;
        if (value < std::numeric_limits<T>::min() ||
            value > std::numeric_limits<T>::max())
          throw UsageError(what + " is out of range");
        if (f.positive && value < 1)
          throw UsageError(what + " must be >= 1, got " +
                           std::to_string(value));
        c.*member = T(value);
      },
      f.field);
}

/// Each flag of `flags` given in `opts` sets its field of `c`.
template <class Config, size_t N>
void readFlags(Options &opts, const ConfigFlag<Config> (&flags)[N], Config &c) {
  for (const ConfigFlag<Config> &f : flags)
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(c.*member)>;
          // Read in the field's range (the range's message names it); a
          // flag not given leaves the field as it is.
          constexpr int64_t kNotGiven = std::numeric_limits<int64_t>::min();
          const int64_t v = opts.integer(
              f.name, kNotGiven,
              std::max<int64_t>(std::numeric_limits<T>::min(), kNotGiven + 1),
              std::numeric_limits<T>::max());
          if (v != kNotGiven)
            setField(f, c, v, "option --" + std::string(f.name));
        },
        f.field);
}

/// `base` with the "flag=value ..." items of `text` (flags of `flags`) set.
template <class Config, size_t N>
Config withItems(Config base, const std::string &text,
                 const ConfigFlag<Config> (&flags)[N], const char *which) {
  std::stringstream in(text);
  for (std::string item; in >> item;) {
    const auto eq = item.find('=');
    const std::string name = item.substr(0, eq);
    const ConfigFlag<Config> *f = nullptr;
    for (const ConfigFlag<Config> &g : flags)
      if (name == g.name)
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
template <class Config, size_t N>
std::vector<Config> withItemsList(const Config &base, const std::string &text,
                                  const ConfigFlag<Config> (&flags)[N],
                                  const char *which) {
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
  readFlags(opts, kForwardFlags, c);
}

std::string againstLabel(size_t which) {
  return which == 0   ? "default"
         : which == 1 ? "against"
                      : fmt::format("against{}", which);
}

std::vector<AttentionConfig> againstConfigs(const AttentionConfig &base,
                                            const std::string &text) {
  return withItemsList(base, text, kForwardFlags,
                       "forward's config (block-m, ragged-end-in-loop, ...)");
}

AttentionBackwardConfig backwardConfigOptions(Options &opts) {
  AttentionBackwardConfig c;
  readFlags(opts, kBackwardFlags, c);
  return c;
}

std::vector<AttentionBackwardConfig>
againstBackwardConfigs(const AttentionBackwardConfig &base,
                       const std::string &text) {
  return withItemsList(base, text, kBackwardFlags,
                       "backward's config (persistent, dq-warps, ...)");
}

} // namespace kiln::cli
