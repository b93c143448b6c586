//===- ForwardFlags.cpp - the forward attention config's flags ------------===//
//
// One table of the options that set kernels::AttentionConfig fields
// (--block-m, --masked-first, ...), read by the commands that build the
// forward (kiln run, ptx, report, ...), by kiln bench attention and by its
// --against items.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "kiln/kernels/Attention.h"

#include <algorithm>
#include <cerrno>
#include <limits>
#include <sstream>
#include <variant>

namespace kiln::cli {

namespace {

using kernels::AttentionConfig;

struct ForwardFlag {
  const char *name;
  std::variant<int64_t AttentionConfig::*, int AttentionConfig::*> field;
  bool positive = false; ///< a tile or a stage count: >= 1
};

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
    {"warp-specialize", &AttentionConfig::warpSpecialize},
    {"pingpong", &AttentionConfig::pingpong},
    {"overlap", &AttentionConfig::overlap},
    {"persistent", &AttentionConfig::persistent}};

/// Sets f's field of `c` to `value` (from --name or an --against item named
/// `what`), refusing what the field's type cannot hold or a positive flag's
/// value below 1.
void setField(const ForwardFlag &f, AttentionConfig &c, int64_t value,
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

} // namespace

void forwardConfigFlags(Options &opts, AttentionConfig &c) {
  for (const ForwardFlag &f : kForwardFlags)
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

AttentionConfig withConfigItems(AttentionConfig base, const std::string &text) {
  std::stringstream in(text);
  for (std::string item; in >> item;) {
    const auto eq = item.find('=');
    const std::string name = item.substr(0, eq);
    const ForwardFlag *f = nullptr;
    for (const ForwardFlag &g : kForwardFlags)
      if (name == g.name)
        f = &g;
    const std::string digits =
        eq == std::string::npos ? "" : item.substr(eq + 1);
    char *end = nullptr;
    errno = 0;
    const int64_t value = std::strtoll(digits.c_str(), &end, 10);
    if (!f || digits.empty() || *end || errno)
      throw UsageError("option --against: '" + item +
                       "' is not flag=integer with a flag of the forward's "
                       "config (block-m, ragged-end-in-loop, ...)");
    setField(*f, base, value, "option --against: '" + item + "'");
  }
  return base;
}

} // namespace kiln::cli
