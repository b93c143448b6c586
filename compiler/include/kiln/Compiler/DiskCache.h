//===- DiskCache.h - compiled kernels kept on disk --------------*- C++ -*-===//
//
// One file per compiled kernel, named by a BLAKE3 hash of everything that
// decides the compile: the compiler build (libkiln's ELF build id), the
// kernel's canonical IR (with its constants and Config), the target and the
// options. An entry holds every stage and the launch metadata. Entries are
// published atomically (temporary file, then rename), carry a checksum (a
// corrupt one is deleted and recompiled), and the least recently used ones
// are evicted above a size cap. Several processes may share one directory.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_COMPILER_DISKCACHE_H
#define KILN_COMPILER_DISKCACHE_H

#include "kiln/Compiler/Compile.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct DiskCacheEntry {
  std::string key;  ///< 64 hex digits
  std::string path; ///< the entry's file
  int64_t bytes = 0;
  int64_t lastUsed = 0; ///< seconds since the epoch (the file's mtime)
  std::string kernel, arch;
  double compileMs = 0;
  /// Its tensors' and integers' specialisation (tensorSpecialisation).
  std::string classes;
};

class DiskCache {
public:
  /// A cache in `dir` (created when missing) holding at most `maxBytes`.
  DiskCache(std::string dir, int64_t maxBytes);

  /// The process's cache: KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
  /// $HOME/.cache/kiln; capped at KILN_CACHE_MAX_MB (default 1024).
  /// KILN_CACHE_DIR=off turns it off: nullptr; so does a folder that cannot
  /// be created (with a warning on stderr, and offReason() saying why).
  static DiskCache *fromEnvironment();
  /// Why fromEnvironment() is null: "KILN_CACHE_DIR=off", or the folder and
  /// the error that made it unusable.
  static const std::string &offReason();

  /// The entry's kernel, or nothing on a miss. A corrupt entry is deleted
  /// and reported as a miss. A hit marks the entry as used (for the LRU).
  std::optional<CompiledKernel> load(const std::string &key);
  /// Publishes an entry atomically, then evicts down to the cap. An entry
  /// larger than the cap is not stored, and a folder that cannot be written
  /// is not either: each warns once per process on stderr.
  void store(const std::string &key, const CompiledKernel &kernel);
  /// Adds the driver's image for `arch` to the entry (republished whole);
  /// nothing when the entry is gone.
  void addImage(const std::string &key, const std::string &arch,
                const LaunchSpec::Image &image);
  /// Whether the JIT keeps the driver's images in entries and loads them
  /// (KILN_CACHE_SASS=1; off by default, see DiskCache.cpp).
  static bool keepsImages();

  /// The entries, most recently used first. Unreadable ones are listed with
  /// kernel "(corrupt)".
  std::vector<DiskCacheEntry> list() const;
  /// Removes every entry; returns how many, and in `failed` how many could
  /// not be removed (with the first reason in `why`).
  int clear(int *failed = nullptr, std::string *why = nullptr);
  /// Removes least recently used entries until the total is under the cap.
  void evict();

  const std::string &dir() const { return dir_; }
  int64_t maxBytes() const { return maxBytes_; }

private:
  std::string pathOf(const std::string &key) const;
  std::string dir_;
  int64_t maxBytes_;
};

/// Encodes a compiled kernel as an entry's bytes and back. decode throws
/// kiln::Error on a bad magic, checksum or field. With an `owner` that keeps
/// `bytes` alive (a mapped entry), the inspection texts (lowered and LLVM IR,
/// the IR after each pass) stay views into `bytes` until read; without one
/// they are copied.
/// An entry's bytes. With a `key`, the entry records it and the compiler's
/// build id, and decoding with `expectKey` rejects it under any other key or
/// from another build (kiln::Error).
std::string encodeCompiledKernel(const CompiledKernel &kernel,
                                 const std::string &key = "");
CompiledKernel decodeCompiledKernel(std::string_view bytes,
                                    std::shared_ptr<const void> owner = {},
                                    std::string_view expectKey = {});

/// BLAKE3 (256 bits) of `text` as 64 hex digits: a cryptographic hash, so
/// that distinct kernels never share a key, and ~10x faster than SHA-256 on
/// the ~100 KB of IR a key hashes.
/// An entry's bytes with the header (magic, checksum) recomputed for its
/// body as it now is: what lets the fuzz tests reach the record parser.
std::string resealCacheEntry(std::string_view entry);

std::string contentHash(std::string_view text);

/// Identifies this build of the compiler: libkiln's ELF build id, or its
/// version and build time when the library has none.
const std::string &compilerBuildId();

} // namespace kiln

#endif // KILN_COMPILER_DISKCACHE_H
