//===- TuningDb.cpp - the tuning database file ----------------------------===//
#include "kiln/Compiler/TuningDb.h"
#include "kiln/Compiler/Autotune.h"
#include "kiln/runtime/Error.h"

#include <fmt/core.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace kiln {

std::string tuningDatabasePath() {
  if (const char *p = std::getenv("KILN_TUNING_DB"); p && *p)
    return p;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/kiln/tuning.tsv";
  if (const char *h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/kiln/tuning.tsv";
  return "kiln-tuning.tsv";
}

namespace {
struct Line {
  std::string key, config;
  double ms;
  long when;
};

std::vector<Line> readLines(const std::string &path) {
  std::vector<Line> out;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    std::stringstream s(text);
    Line l;
    std::string ms, when;
    if (!std::getline(s, l.key, '\t') || !std::getline(s, l.config, '\t') ||
        !std::getline(s, ms, '\t') || !std::getline(s, when))
      continue; // a malformed line is skipped, not fatal
    char *end = nullptr;
    l.ms = std::strtod(ms.c_str(), &end);
    if (*end)
      continue;
    l.when = std::atol(when.c_str());
    out.push_back(std::move(l));
  }
  return out;
}
} // namespace

bool TuningDb::hasAny() const {
  std::error_code ec;
  return std::filesystem::file_size(path_, ec) > 0 && !ec;
}

std::optional<TuningDb::Record> TuningDb::lookup(const std::string &key) const {
  for (const Line &l : readLines(path_))
    if (l.key == key)
      return Record{l.config, l.ms};
  return std::nullopt;
}

void TuningDb::record(const std::string &key, const std::string &config,
                      double ms) {
  std::filesystem::path p(path_);
  std::error_code ec;
  if (p.has_parent_path())
    std::filesystem::create_directories(p.parent_path(), ec);
  int lock = ::open((path_ + ".lock").c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0)
    throw Error("tuning database: cannot lock " + path_ + ".lock");
  std::vector<Line> lines = readLines(path_);
  std::erase_if(lines, [&](const Line &l) { return l.key == key; });
  lines.push_back({key, config, ms, long(std::time(nullptr))});
  std::string tmp = fmt::format("{}.tmp-{}", path_, ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const Line &l : lines)
      out << l.key << '\t' << l.config << '\t' << fmt::format("{:.4f}", l.ms)
          << '\t' << l.when << '\n';
    if (!out.flush()) {
      ::close(lock);
      throw Error("tuning database: cannot write " + tmp);
    }
  }
  std::filesystem::rename(tmp, path_, ec);
  ::close(lock); // releases the flock
  if (ec)
    throw Error("tuning database: cannot publish " + path_ + ": " +
                ec.message());
}

} // namespace kiln
