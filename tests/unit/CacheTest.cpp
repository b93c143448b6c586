//===- CacheTest.cpp - the disk cache and the tuning database (no GPU) ----===//
#include "TestUtil.h"
#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/DiskCache.h"
#include "kiln/Compiler/TuningDb.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/runtime/Error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

using namespace kiln;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {
/// A fresh folder under the system's temp dir, removed afterwards.
struct TempDir {
  TempDir() {
    path = (fs::temp_directory_path() /
            ("kiln-test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

CompiledKernel sample(const std::string &name, size_t ptxBytes) {
  CompiledKernel k;
  k.name = name;
  k.arch = "sm_90a";
  k.grid = {3, 2, 1};
  k.threads = 256;
  k.sharedBytes = 98304;
  k.persistent = true;
  k.params = {{"A", ParamInfo::Kind::Pointer, DType::bf16},
              {"A_stride0", ParamInfo::Kind::Scalar, DType::i32,
               ScalarClass::DivisibleBy16}};
  k.tensors = {{"A", DType::bf16, {64, 32}, 0, {1, 2}, true},
               {"B", DType::f32, {64}, 0, {1}, false}};
  k.tensorMaps = {
      TensorMapInfo::parse("ptr=0 elem=2 dims=64,32 strides=1,2 box=64,32")};
  k.kilnIR = "module {}\n";
  k.layouts = "#blocked";
  k.loweredIR = "llvm.func @" + name;
  k.llvmIR = "define void @" + name;
  k.ptx = std::string(ptxBytes, 'p') + "\n.entry " + name + " 5 \n";
  k.stages = {{"kiln", "", 0.5}, {"cse.2", "after cse", 1.25}};
  k.compileMs = 12.5;
  return k;
}
} // namespace

TEST(TensorMapInfo, TextRoundTripsAndBadTextIsNamed) {
  TensorMapInfo t = TensorMapInfo::parse(
      "ptr=5 elem=2 dims=1,2,300,128 strides=6,7,8,9 box=1,1,64,64");
  EXPECT_EQ(t.pointerParam, 5);
  EXPECT_EQ(t.dims, (std::vector<int64_t>{1, 2, 300, 128}));
  EXPECT_EQ(t.strideParams, (std::vector<int>{6, 7, 8, 9}));
  EXPECT_EQ(TensorMapInfo::parse(t.str()).str(), t.str());
  for (const char *bad : {"", "ptr=1 dims=4 strides=1,2 box=4", "ptr=x",
                          "dims=4 strides=1 box=4", "ptr=1 size=3"})
    EXPECT_THROW(
        {
          try {
            TensorMapInfo::parse(bad);
          } catch (const Error &e) {
            EXPECT_THAT(e.what(), ::testing::HasSubstr("tensor map"));
            throw;
          }
        },
        Error)
        << bad;
}

TEST(DiskCache, EntryRoundTripsEveryField) {
  CompiledKernel k = sample("gemm", 100);
  CompiledKernel d = decodeCompiledKernel(encodeCompiledKernel(k));
  EXPECT_EQ(d.name, k.name);
  EXPECT_EQ(d.arch, k.arch);
  EXPECT_EQ(d.grid, k.grid);
  EXPECT_EQ(d.threads, k.threads);
  EXPECT_EQ(d.sharedBytes, k.sharedBytes);
  EXPECT_EQ(d.persistent, k.persistent);
  ASSERT_EQ(d.params.size(), 2u);
  EXPECT_EQ(d.params[1].name, "A_stride0");
  EXPECT_EQ(d.params[1].kind, ParamInfo::Kind::Scalar);
  EXPECT_EQ(d.params[1].assumed, ScalarClass::DivisibleBy16);
  EXPECT_EQ(d.params[0].assumed, ScalarClass::Any);
  ASSERT_EQ(d.tensors.size(), 2u);
  EXPECT_EQ(d.tensors[0].shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(d.tensors[0].strideParams, (std::vector<int>{1, 2}));
  EXPECT_TRUE(d.tensors[0].aligned);
  EXPECT_FALSE(d.tensors[1].aligned);
  ASSERT_EQ(d.tensorMaps.size(), 1u);
  EXPECT_EQ(d.tensorMaps[0].str(), k.tensorMaps[0].str());
  EXPECT_EQ(d.tensorMaps[0].box, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(d.ptx, k.ptx);
  EXPECT_EQ(d.llvmIR.str(), k.llvmIR.str());
  EXPECT_EQ(d.loweredIR.str(), k.loweredIR.str());
  EXPECT_EQ(d.layouts, k.layouts);
  EXPECT_EQ(d.kilnIR, k.kilnIR);
  ASSERT_EQ(d.stages.size(), 2u);
  EXPECT_EQ(d.stages[1].name, "cse.2");
  EXPECT_EQ(d.stages[1].text.str(), "after cse");
  EXPECT_DOUBLE_EQ(d.stages[1].ms, 1.25);
}

// The driver's image of a loaded kernel joins its entry (any bytes, NUL
// included), for each architecture, and comes back with the next hit;
// images are opt-in (KILN_CACHE_SASS=1), and an entry that is gone stays gone.
TEST(DiskCache, EntryKeepsTheDriversImages) {
  TempDir dir;
  DiskCache cache(dir.path, 1 << 20);
  std::string key(64, 'i');
  cache.store(key, sample("imaged", 300));
  const std::string cubin("\x7f"
                          "ELF\0\x01\x02 sass \n bytes",
                          21);
  cache.addImage(key, "sm_90", {cubin, "ptxas info: 40 registers"});
  cache.addImage(key, "sm_80", {"other", ""});
  std::optional<CompiledKernel> hit = cache.load(key);
  ASSERT_TRUE(hit);
  ASSERT_EQ(hit->images.size(), 2u);
  EXPECT_EQ(hit->images.at("sm_90").bytes, cubin);
  EXPECT_EQ(hit->images.at("sm_90").log, "ptxas info: 40 registers");
  EXPECT_TRUE(hit->spec().images.empty()) << "images are opt-in";
  ::setenv("KILN_CACHE_SASS", "1", 1);
  EXPECT_EQ(hit->spec().images.at("sm_80").bytes, "other");
  ::unsetenv("KILN_CACHE_SASS");
  EXPECT_EQ(hit->ptx, sample("imaged", 300).ptx);
  cache.addImage(std::string(64, 'z'), "sm_90", {cubin, ""});
  EXPECT_FALSE(cache.load(std::string(64, 'z')));
  ::unsetenv("KILN_CACHE_SASS");
  EXPECT_FALSE(DiskCache::keepsImages()) << "opt-in";
  ::setenv("KILN_CACHE_SASS", "1", 1);
  EXPECT_TRUE(DiskCache::keepsImages());
  ::setenv("KILN_CACHE_SASS", "yes", 1); // not silently off
  EXPECT_THAT(test::errorOf([] { (void)DiskCache::keepsImages(); }),
              HasSubstr("KILN_CACHE_SASS: 'yes' is not 0 or 1"));
  ::unsetenv("KILN_CACHE_SASS");
}

// A hit maps the entry and reads the inspection texts only when asked: they
// must still be the stored ones after the entry is evicted (unlinked) and
// republished with other bytes, and several threads may read them at once.
TEST(DiskCache, HitReadsInspectionTextsLazilyAndSurvivesEviction) {
  TempDir dir;
  DiskCache cache(dir.path, 1 << 20);
  std::string key(64, 'b');
  CompiledKernel k = sample("lazy", 5000);
  cache.store(key, k);
  std::optional<CompiledKernel> hit = cache.load(key);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->llvmIR.size(), k.llvmIR.size()) << "size without reading";
  std::string file = dir.path + "/" + key + ".kiln";
  fs::remove(file);
  cache.store(key, sample("other", 7000));
  CompiledKernel copy = *hit;
  std::vector<std::thread> readers;
  std::vector<std::string> seen(4);
  for (int i = 0; i < 4; ++i)
    readers.emplace_back([&, i] {
      seen[i] = (i % 2 ? copy : *hit).loweredIR.str() +
                (i % 2 ? *hit : copy).stages[1].text.str();
    });
  for (std::thread &t : readers)
    t.join();
  for (const std::string &s : seen)
    EXPECT_EQ(s, k.loweredIR.str() + "after cse");
  EXPECT_EQ(hit->llvmIR.str(), k.llvmIR.str());
  EXPECT_EQ(hit->ptx, k.ptx);
}

TEST(DiskCache, CorruptEntryIsRejectedDeletedAndMissed) {
  TempDir dir;
  DiskCache cache(dir.path, 1 << 20);
  std::string key(64, 'a');
  cache.store(key, sample("k", 1000));
  ASSERT_TRUE(cache.load(key));
  std::string file = dir.path + "/" + key + ".kiln";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('X'); // one flipped byte inside the PTX
  }
  EXPECT_THROW(
      {
        std::ifstream in(file, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), {});
        decodeCompiledKernel(bytes);
      },
      Error);
  EXPECT_FALSE(cache.load(key));
  EXPECT_FALSE(fs::exists(file)) << "a corrupt entry is removed";
  // A truncated file (a writer killed mid-way would leave only a temp file,
  // but a truncated entry must not pass either).
  cache.store(key, sample("k", 1000));
  fs::resize_file(file, 300);
  EXPECT_FALSE(cache.load(key));
}

// An entry records its key and build: a valid entry filed under another key
// (a D=128 kernel's PTX for a D=64 request) is rejected, deleted and missed.
TEST(DiskCache, EntryFiledUnderAnotherKeyIsRejected) {
  TempDir dir;
  DiskCache cache(dir.path, 1 << 20);
  std::string a(64, 'a'), b(64, 'b');
  cache.store(a, sample("ka", 1000));
  ASSERT_TRUE(cache.load(a));
  fs::copy_file(dir.path + "/" + a + ".kiln", dir.path + "/" + b + ".kiln");
  EXPECT_FALSE(cache.load(b));
  EXPECT_FALSE(fs::exists(dir.path + "/" + b + ".kiln"));
  EXPECT_TRUE(cache.load(a));
  std::string bytes = encodeCompiledKernel(sample("ka", 1000), a);
  EXPECT_THAT(test::errorOf([&] { decodeCompiledKernel(bytes, {}, b); }),
              HasSubstr("filed under " + b + " but its key is " + a));
  // Without a key (an entry of an older writer) it is not served either.
  std::string unkeyed = encodeCompiledKernel(sample("ka", 1000));
  EXPECT_THAT(test::errorOf([&] { decodeCompiledKernel(unkeyed, {}, a); }),
              HasSubstr("does not record its key"));
  EXPECT_EQ(decodeCompiledKernel(unkeyed).name, "ka"); // listing reads it
}

// An entry larger than the cap is not stored (storing it would evict every
// entry and then itself); the others stay.
TEST(DiskCache, EntryLargerThanTheCapIsNotStored) {
  TempDir dir;
  std::string a(64, 'a'), b(64, 'b');
  DiskCache cache(dir.path, 20000);
  cache.store(a, sample("small", 1000));
  cache.store(b, sample("large", 50000));
  EXPECT_TRUE(cache.load(a));
  EXPECT_FALSE(cache.load(b));
  int failed = -1;
  EXPECT_EQ(cache.clear(&failed), 1);
  EXPECT_EQ(failed, 0);
}

TEST(DiskCache, EvictsLeastRecentlyUsedAboveTheCap) {
  TempDir dir;
  std::string a(64, 'a'), b(64, 'b'), c(64, 'c');
  size_t entry = encodeCompiledKernel(sample("k", 10000), a).size();
  DiskCache cache(dir.path, int64_t(2 * entry + entry / 2));
  cache.store(a, sample("k", 10000));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cache.store(b, sample("k", 10000));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(cache.load(a)); // a is now more recent than b
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cache.store(c, sample("k", 10000)); // over the cap: b goes
  EXPECT_TRUE(cache.load(a));
  EXPECT_FALSE(cache.load(b));
  EXPECT_TRUE(cache.load(c));
  auto list = cache.list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].kernel, "k");
  EXPECT_EQ(cache.clear(), 2);
  EXPECT_TRUE(cache.list().empty());
}

// Several processes store and load the same and different keys at once;
// every load sees a whole entry, and every entry is there at the end.
TEST(DiskCache, SeveralProcessesShareOneDirectory) {
  TempDir dir;
  const int procs = 6, rounds = 30;
  std::vector<pid_t> kids;
  for (int p = 0; p < procs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int bad = 0;
      DiskCache cache(dir.path, int64_t(1) << 30);
      for (int r = 0; r < rounds; ++r) {
        std::string shared(64, 's'), own = std::string(63, 'p') + char('0' + p);
        CompiledKernel k = sample("shared", 50000);
        cache.store(shared, k);
        cache.store(own, sample("own" + std::to_string(p), 20000 + r));
        auto got = cache.load(shared);
        bad += !got || got->ptx != k.ptx;
      }
      ::_exit(bad ? 1 : 0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "a process read a partial or missing entry";
  }
  DiskCache cache(dir.path, int64_t(1) << 30);
  EXPECT_EQ(cache.list().size(), size_t(procs + 1));
  for (const DiskCacheEntry &e : cache.list())
    EXPECT_NE(e.kernel, "(corrupt)");
  for (const auto &f : fs::directory_iterator(dir.path))
    EXPECT_EQ(f.path().extension(), ".kiln") << "temporary file left behind";
}

// The JIT publishes to the disk cache and a later lookup (here: after the
// in-process map is cleared) is served from it.
TEST(DiskCache, CompileCachedUsesTheDisk) {
  DiskCache *disk = DiskCache::fromEnvironment();
  if (!disk)
    GTEST_SKIP() << "KILN_CACHE_DIR=off";
  kernels::GemmShape s{64, 32, 96};
  Kernel k = kernels::gemm(s);
  std::string key = compileCacheKey(k, {});
  std::error_code ec;
  fs::remove(disk->dir() + "/" + key + ".kiln", ec);
  clearInProcessCompileCache(); // another test may have compiled its class
  auto first = compileCached(k, {});
  EXPECT_TRUE(fs::exists(disk->dir() + "/" + key + ".kiln"));
  clearInProcessCompileCache();
  CompileCacheStats before = compileCacheStats();
  auto second = compileCached(kernels::gemm(s), {});
  CompileCacheStats after = compileCacheStats();
  EXPECT_EQ(after.diskHits - before.diskHits, 1);
  EXPECT_EQ(after.misses - before.misses, 0);
  EXPECT_EQ(second->ptx, first->ptx);
  EXPECT_EQ(second->sharedBytes, first->sharedBytes);
  // Keys: 64 hex digits, different per target.
  EXPECT_EQ(key.size(), 64u);
  EXPECT_NE(key, compileCacheKey(k, {.arch = "sm_80"}));
  EXPECT_THAT(compilerBuildId(), ::testing::HasSubstr("kiln"));
}

// An item of KILN_LOG that kiln does not know is refused before any work,
// not a log that silently never prints.
TEST(KernelCache, UnknownKilnLogItemIsAnError) {
  ::setenv("KILN_LOG", "lanch", 1);
  std::string msg = test::errorOf([] {
    (void)jitKernel(kernels::gemm({64, 32, 96}), GpuTarget{});
  });
  ::setenv("KILN_LOG", "launch,,launch", 1); // known: past the check
  std::string ok = test::errorOf([] {
    (void)jitKernel(kernels::gemm({64, 32, 96}), GpuTarget{});
  });
  ::unsetenv("KILN_LOG");
  EXPECT_THAT(msg, HasSubstr("KILN_LOG: unknown item 'lanch' (known: launch"));
  EXPECT_THAT(ok, ::testing::Not(HasSubstr("KILN_LOG")));
}

TEST(TuningDb, RecordsReplaceAndSurviveConcurrentWriters) {
  TempDir dir;
  std::string path = dir.path + "/tuning.tsv";
  TuningDb db(path);
  EXPECT_FALSE(db.hasAny());
  EXPECT_FALSE(db.lookup("k1"));
  db.record("k1", "blockM=128 blockN=64", 1.5);
  db.record("k1", "blockM=64 blockN=64", 1.25); // replaces
  auto r = db.lookup("k1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->config, "blockM=64 blockN=64");
  EXPECT_DOUBLE_EQ(r->ms, 1.25);
  { // a malformed line is skipped, not fatal
    std::ofstream(path, std::ios::app) << "garbage without tabs\n";
  }
  EXPECT_TRUE(db.lookup("k1"));
  std::vector<pid_t> kids;
  for (int p = 0; p < 6; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      TuningDb mine(path);
      for (int i = 0; i < 10; ++i)
        mine.record("p" + std::to_string(p) + "-" + std::to_string(i), "c", i);
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids)
    ::waitpid(pid, nullptr, 0);
  for (int p = 0; p < 6; ++p)
    for (int i = 0; i < 10; ++i)
      EXPECT_TRUE(db.lookup("p" + std::to_string(p) + "-" + std::to_string(i)))
          << "a concurrent writer's record was lost";
  EXPECT_TRUE(db.lookup("k1"));
}
