//===- TuningDb.h - the tuning database file ---------------------*- C++
//-*-===//
//
// A tab-separated text file, one record per line:
//   key <TAB> config <TAB> milliseconds <TAB> unix time
// Writers take an exclusive flock on "<file>.lock", re-read the file, replace
// or append their record and publish the new file by rename, so that
// concurrent tuners never lose each other's records and readers never see a
// partial file.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_COMPILER_TUNINGDB_H
#define KILN_COMPILER_TUNINGDB_H

#include <optional>
#include <string>

namespace kiln {

class TuningDb {
public:
  struct Record {
    std::string config;
    double ms = 0;
  };
  explicit TuningDb(std::string path) : path_(std::move(path)) {}
  bool hasAny() const;
  std::optional<Record> lookup(const std::string &key) const;
  void record(const std::string &key, const std::string &config, double ms);
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

} // namespace kiln

#endif // KILN_COMPILER_TUNINGDB_H
