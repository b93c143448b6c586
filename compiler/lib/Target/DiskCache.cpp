//===- DiskCache.cpp - the cache directory and the compiler's build id ----===//
//
// Entries are files named <key>.kiln (CacheEntry.cpp encodes them). Writers
// publish with rename, readers touch the mtime on a hit, and eviction
// removes the oldest mtimes first; every step tolerates another process
// doing the same at once.
//
//===----------------------------------------------------------------------===//
#include "kiln/Compiler/DiskCache.h"
#include "kiln/runtime/Error.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace kiln {

//===-- The cache directory -----------------------------------------------===//

DiskCache::DiskCache(std::string dir, int64_t maxBytes)
    : dir_(std::move(dir)), maxBytes_(maxBytes) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec)
    throw Error("kiln cache: cannot create " + dir_ + ": " + ec.message());
}

static std::string &offReasonText() {
  static std::string why;
  return why;
}

const std::string &DiskCache::offReason() {
  fromEnvironment();
  return offReasonText();
}

/// Prints `what` on stderr the first time `once` is seen in this process.
static void warnOnce(std::atomic<bool> &once, const std::string &what) {
  if (!once.exchange(true))
    std::fprintf(stderr, "kiln: %s\n", what.c_str());
}

DiskCache *DiskCache::fromEnvironment() {
  static DiskCache *cache = []() -> DiskCache * {
    std::string dir;
    if (const char *d = std::getenv("KILN_CACHE_DIR"))
      dir = d;
    else if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
      dir = std::string(x) + "/kiln";
    else if (const char *h = std::getenv("HOME"); h && *h)
      dir = std::string(h) + "/.cache/kiln";
    if (dir.empty() || dir == "off") {
      offReasonText() = dir.empty() ? "no KILN_CACHE_DIR, XDG_CACHE_HOME or HOME"
                                    : "KILN_CACHE_DIR=off";
      return nullptr;
    }
    int64_t mb = 1024;
    if (const char *m = std::getenv("KILN_CACHE_MAX_MB")) {
      char *end = nullptr;
      errno = 0;
      mb = std::strtoll(m, &end, 10);
      // Megabytes to bytes must fit 64 bits.
      if (!*m || *end || errno == ERANGE || mb < 1 ||
          mb > (std::numeric_limits<int64_t>::max() >> 20))
        throw Error(std::string("KILN_CACHE_MAX_MB: '") + m +
                    "' is not a number of megabytes in [1, 2^43)");
    }
    try {
      return new DiskCache(dir, mb << 20);
    } catch (const Error &e) {
      // An unusable folder costs recompiles, never a failed compile.
      offReasonText() = e.what();
      std::fprintf(stderr, "kiln: disk cache off: %s\n", e.what());
      return nullptr;
    }
  }();
  return cache;
}

std::string DiskCache::pathOf(const std::string &key) const {
  return dir_ + "/" + key + ".kiln";
}

namespace {
/// An entry mapped read-only. Entries are replaced by rename and removed by
/// unlink, never rewritten in place, so the mapping stays what was read even
/// when another process evicts or republishes the entry meanwhile.
struct MappedFile {
  const char *data = nullptr;
  size_t size = 0;
  MappedFile(const MappedFile &) = delete;
  MappedFile() = default;
  ~MappedFile() {
    if (size)
      ::munmap(const_cast<char *>(data), size);
  }
  std::string_view bytes() const { return {data, size}; }
};
} // namespace

static std::shared_ptr<const MappedFile> mapFile(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return nullptr;
  auto m = std::make_shared<MappedFile>();
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    // MAP_POPULATE: map the page cache's pages in one go (a hit reads them
    // all for the checksum); no copy, unlike read() into a fresh buffer.
    void *p = ::mmap(nullptr, size_t(st.st_size), PROT_READ,
                     MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (p != MAP_FAILED) {
      m->data = static_cast<const char *>(p);
      m->size = size_t(st.st_size);
    }
  }
  ::close(fd);
  return m->size ? m : nullptr;
}

std::optional<CompiledKernel> DiskCache::load(const std::string &key) {
  std::string path = pathOf(key);
  std::shared_ptr<const MappedFile> file = mapFile(path);
  if (!file)
    return std::nullopt;
  try {
    // The inspection texts stay in the mapping until read (StageText). An
    // entry filed under another key, or written by another build, is
    // dropped like a corrupt one.
    CompiledKernel k = decodeCompiledKernel(file->bytes(), file, key);
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); // now: recently used
    return k;
  } catch (const Error &) {
    // Corrupt or from an incompatible writer: drop it; the caller compiles.
    std::error_code ec;
    fs::remove(path, ec);
    return std::nullopt;
  }
}

void DiskCache::store(const std::string &key, const CompiledKernel &kernel) {
  static std::atomic<int> counter{0};
  static std::atomic<bool> tooLarge{false}, unwritable{false};
  std::string bytes = encodeCompiledKernel(kernel, key);
  if (int64_t(bytes.size()) > maxBytes_) {
    // Storing it would evict every entry and then itself.
    warnOnce(tooLarge, fmt::format("disk cache: an entry of {} bytes ({}) is "
                                   "larger than the cap of {} bytes "
                                   "(KILN_CACHE_MAX_MB); not stored",
                                   bytes.size(), kernel.name, maxBytes_));
    return;
  }
  std::string tmp = fmt::format("{}/.tmp-{}-{}-{}", dir_, ::getpid(), counter++,
                                key.substr(0, 16));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out.flush()) {
      std::error_code ec;
      fs::remove(tmp, ec);
      // A full disk or a read-only folder costs recompiles, never a failure.
      warnOnce(unwritable, "disk cache: cannot write to " + dir_ +
                               " (read-only or full): compiled kernels are "
                               "not kept");
      return;
    }
  }
  std::error_code ec;
  fs::rename(tmp, pathOf(key), ec); // atomic: readers see all or nothing
  if (ec) {
    fs::remove(tmp, ec);
    warnOnce(unwritable, "disk cache: cannot publish an entry in " + dir_ +
                             ": compiled kernels are not kept");
    return;
  }
  evict();
}

bool DiskCache::keepsImages() {
  // Opt-in: the driver's linker, which hands the image back, compiles the
  // PTX as relocatable code, and its register allocation differs from a
  // plain module load (the GEMM's 128x256 epilogue: 632 B of spills instead
  // of 136 on the H200, 5-15% slower).
  const char *v = std::getenv("KILN_CACHE_SASS");
  if (!v || !*v || std::string_view(v) == "0")
    return false;
  if (std::string_view(v) != "1")
    throw Error(std::string("KILN_CACHE_SASS: '") + v + "' is not 0 or 1");
  return true;
}

void DiskCache::addImage(const std::string &key, const std::string &arch,
                         const LaunchSpec::Image &image) {
  std::optional<CompiledKernel> k = load(key);
  if (!k || image.bytes.empty())
    return;
  k->images[arch] = image;
  store(key, *k);
}

std::vector<DiskCacheEntry> DiskCache::list() const {
  std::vector<DiskCacheEntry> out;
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(dir_, ec)) {
    std::string name = e.path().filename().string();
    if (name.size() != 64 + 5 || e.path().extension() != ".kiln")
      continue;
    DiskCacheEntry d;
    d.key = name.substr(0, 64);
    d.path = e.path().string();
    struct stat st;
    if (::stat(d.path.c_str(), &st) != 0)
      continue; // evicted meanwhile
    d.bytes = st.st_size;
    d.lastUsed = st.st_mtim.tv_sec;
    try {
      std::shared_ptr<const MappedFile> file = mapFile(d.path);
      if (!file)
        continue;
      CompiledKernel k = decodeCompiledKernel(file->bytes(), file);
      d.kernel = k.name;
      d.arch = k.arch;
      d.compileMs = k.compileMs;
      d.classes = tensorSpecialisation(k);
    } catch (const Error &) {
      d.kernel = "(corrupt)";
    }
    out.push_back(std::move(d));
  }
  std::sort(out.begin(), out.end(),
            [](const DiskCacheEntry &a, const DiskCacheEntry &b) {
              return a.lastUsed > b.lastUsed;
            });
  return out;
}

int DiskCache::clear(int *failed, std::string *why) {
  int n = 0, bad = 0;
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(dir_, ec)) {
    std::string name = e.path().filename().string();
    const bool entry = e.path().extension() == ".kiln";
    if (!entry && name.rfind(".tmp-", 0) != 0)
      continue;
    std::error_code rm;
    if (fs::remove(e.path(), rm))
      n += entry;
    else if (rm && entry && !bad++ && why)
      *why = e.path().string() + ": " + rm.message();
  }
  if (ec && why && why->empty())
    *why = dir_ + ": " + ec.message();
  if (failed)
    *failed = bad + (ec ? 1 : 0);
  return n;
}

void DiskCache::evict() {
  struct File {
    std::string path;
    int64_t bytes;
    struct timespec used;
  };
  std::vector<File> files;
  int64_t total = 0;
  std::error_code ec;
  time_t now = ::time(nullptr);
  for (const auto &e : fs::directory_iterator(dir_, ec)) {
    std::string name = e.path().filename().string();
    struct stat st;
    if (::stat(e.path().c_str(), &st) != 0)
      continue;
    // Temporary files a crashed writer left behind.
    if (name.rfind(".tmp-", 0) == 0) {
      if (now - st.st_mtim.tv_sec > 3600)
        fs::remove(e.path(), ec);
      continue;
    }
    if (e.path().extension() != ".kiln")
      continue;
    files.push_back({e.path().string(), st.st_size, st.st_mtim});
    total += st.st_size;
  }
  if (total <= maxBytes_)
    return;
  std::sort(files.begin(), files.end(), [](const File &a, const File &b) {
    return a.used.tv_sec != b.used.tv_sec ? a.used.tv_sec < b.used.tv_sec
                                          : a.used.tv_nsec < b.used.tv_nsec;
  });
  // Another process may evict the same files: a failed remove is fine.
  for (const File &f : files) {
    if (total <= maxBytes_)
      break;
    fs::remove(f.path, ec);
    total -= f.bytes;
  }
}

//===-- Build id ----------------------------------------------------------===//

/// The NT_GNU_BUILD_ID note of the loaded object (libkiln) that holds this
/// function's code.
static std::string elfBuildId() {
  std::string id;
  dl_iterate_phdr(
      [](struct dl_phdr_info *obj, size_t, void *data) {
        auto fn = reinterpret_cast<ElfW(Addr)>(&elfBuildId);
        bool ours = false;
        for (int i = 0; i < obj->dlpi_phnum; ++i) {
          const ElfW(Phdr) &p = obj->dlpi_phdr[i];
          ElfW(Addr) lo = obj->dlpi_addr + p.p_vaddr;
          ours |= p.p_type == PT_LOAD && fn >= lo && fn < lo + p.p_memsz;
        }
        if (!ours)
          return 0;
        for (int i = 0; i < obj->dlpi_phnum; ++i) {
          const ElfW(Phdr) &p = obj->dlpi_phdr[i];
          if (p.p_type != PT_NOTE)
            continue;
          auto *at = reinterpret_cast<const char *>(obj->dlpi_addr + p.p_vaddr);
          const char *end = at + p.p_memsz;
          while (at + sizeof(ElfW(Nhdr)) <= end) {
            auto *n = reinterpret_cast<const ElfW(Nhdr) *>(at);
            const char *name = at + sizeof(ElfW(Nhdr));
            const char *desc = name + ((n->n_namesz + 3) & ~3u);
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 &&
                std::string(name, 3) == "GNU") {
              auto *out = static_cast<std::string *>(data);
              for (unsigned j = 0; j < n->n_descsz; ++j)
                *out += fmt::format("{:02x}", uint8_t(desc[j]));
              return 1;
            }
            at = desc + ((n->n_descsz + 3) & ~3u);
          }
        }
        return 1;
      },
      &id);
  return id;
}

const std::string &compilerBuildId() {
  static const std::string id = [] {
    std::string elf = elfBuildId();
    if (!elf.empty())
      return "kiln " KILN_VERSION " build-id " + elf;
    // Linked without a build id: the library file's identity instead.
    Dl_info info;
    struct stat st {};
    if (dladdr(reinterpret_cast<void *>(&elfBuildId), &info) &&
        ::stat(info.dli_fname, &st) == 0)
      return fmt::format("kiln {} file {} size {} mtime {}.{}", KILN_VERSION,
                         info.dli_fname, st.st_size, st.st_mtim.tv_sec,
                         st.st_mtim.tv_nsec);
    return std::string("kiln " KILN_VERSION);
  }();
  return id;
}

} // namespace kiln
