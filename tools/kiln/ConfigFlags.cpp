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

/// What a flag's value may be: any integer its field holds, a tile or a
/// stage count (>= 1), or a switch (0 or 1; left out, the default).
enum class FlagKind { Any, Positive, Switch };

template <class Config> struct ConfigFlag {
  const char *name;
  std::variant<int64_t Config::*, int Config::*> field;
  FlagKind kind = FlagKind::Any;
};
using ForwardFlag = ConfigFlag<AttentionConfig>;
using BackwardFlag = ConfigFlag<AttentionBackwardConfig>;

const ForwardFlag kForwardFlags[] = {
    {"block-m", &AttentionConfig::blockM, FlagKind::Positive},
    {"block-n", &AttentionConfig::blockN, FlagKind::Positive},
    {"warps", &AttentionConfig::warps},
    {"stages", &AttentionConfig::stages, FlagKind::Positive},
    {"reload-ids", &AttentionConfig::reloadThreadIds, FlagKind::Switch},
    {"block-n-diagonal", &AttentionConfig::blockNDiagonal},
    {"block-n-ragged-end", &AttentionConfig::blockNRaggedEnd},
    {"ragged-end-in-loop", &AttentionConfig::raggedEndInLoop, FlagKind::Switch},
    {"masked-first", &AttentionConfig::maskedBlockFirst, FlagKind::Switch},
    {"align-rows-to-end", &AttentionConfig::alignRowsToEnd, FlagKind::Switch},
    {"narrow-in-diagonal", &AttentionConfig::narrowStepInDiagonal,
     FlagKind::Switch},
    {"copy-per-register", &AttentionConfig::copyAddressesPerRegister,
     FlagKind::Switch},
    {"longest-first-globally", &AttentionConfig::longestFirstGlobally,
     FlagKind::Switch},
    {"head-group", &AttentionConfig::headGroup},
    {"dynamic-tiles", &AttentionConfig::dynamicTiles, FlagKind::Switch},
    {"wgmma", &AttentionConfig::wgmma, FlagKind::Switch},
    {"tma", &AttentionConfig::tma, FlagKind::Switch},
    {"tma-store", &AttentionConfig::tmaStore, FlagKind::Switch},
    {"skip-dead-rows", &AttentionConfig::skipDeadRows, FlagKind::Switch},
    {"one-shot-loads", &AttentionConfig::oneShotLoads, FlagKind::Switch},
    {"warp-specialize", &AttentionConfig::warpSpecialize, FlagKind::Switch},
    {"pingpong", &AttentionConfig::pingpong, FlagKind::Switch},
    {"overlap", &AttentionConfig::overlap, FlagKind::Switch},
    {"peel-first", &AttentionConfig::peelFirstStep, FlagKind::Switch},
    {"persistent", &AttentionConfig::persistent, FlagKind::Switch},
    {"min-blocks-per-sm", &AttentionConfig::minBlocksPerSM},
    {"split-keys", &AttentionConfig::splitKeys},
    {"small-tiles", &AttentionConfig::smallTiles, FlagKind::Switch}};

const BackwardFlag kBackwardFlags[] = {
    {"block-m", &AttentionBackwardConfig::blockM},
    {"block-n", &AttentionBackwardConfig::blockN},
    {"dq-block-m", &AttentionBackwardConfig::dqBlockM},
    {"dq-block-n", &AttentionBackwardConfig::dqBlockN},
    {"warps", &AttentionBackwardConfig::warps},
    {"dq-warps", &AttentionBackwardConfig::dqWarps},
    {"stages", &AttentionBackwardConfig::stages, FlagKind::Positive},
    {"pingpong", &AttentionBackwardConfig::pingpong, FlagKind::Switch},
    {"overlap", &AttentionBackwardConfig::overlap, FlagKind::Switch},
    {"min-blocks-per-sm", &AttentionBackwardConfig::minBlocksPerSM},
    {"wgmma", &AttentionBackwardConfig::wgmma, FlagKind::Switch},
    {"tma", &AttentionBackwardConfig::tma, FlagKind::Switch},
    {"warp-specialize", &AttentionBackwardConfig::warpSpecialize,
     FlagKind::Switch},
    {"static-shapes", &AttentionBackwardConfig::staticShapes, FlagKind::Switch},
    {"separate-dk-dv", &AttentionBackwardConfig::separateDkDv,
     FlagKind::Switch},
    {"deterministic", &AttentionBackwardConfig::deterministic,
     FlagKind::Switch},
    {"reload-ids", &AttentionBackwardConfig::reloadThreadIds, FlagKind::Switch},
    {"persistent", &AttentionBackwardConfig::persistent, FlagKind::Switch},
    {"dynamic-tiles", &AttentionBackwardConfig::dynamicTiles, FlagKind::Switch},
    {"longest-first-globally", &AttentionBackwardConfig::longestFirst,
     FlagKind::Switch},
    {"kv-in-registers", &AttentionBackwardConfig::kvInRegisters,
     FlagKind::Switch},
    {"scores-by-queries", &AttentionBackwardConfig::scoresByQueries,
     FlagKind::Switch},
    {"fold-statistics", &AttentionBackwardConfig::foldStatistics,
     FlagKind::Switch},
    {"tma-store", &AttentionBackwardConfig::tmaStore, FlagKind::Switch},
    {"convert-dq-last", &AttentionBackwardConfig::convertDqLast,
     FlagKind::Switch},
    {"overlap-dq-convert", &AttentionBackwardConfig::overlapDqConvert,
     FlagKind::Switch},
    {"head-group", &AttentionBackwardConfig::headGroup}};

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
        if (f.kind == FlagKind::Positive && value < 1)
          throw UsageError(what + " must be >= 1, got " +
                           std::to_string(value));
        if (f.kind == FlagKind::Switch && value != 0 && value != 1)
          throw UsageError(what + " must be 0 or 1, got " +
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
