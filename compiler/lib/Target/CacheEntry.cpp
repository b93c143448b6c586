//===- CacheEntry.cpp - a compiled kernel as a disk-cache entry ----------===//
//
// Entry file: "kiln-cache 1\n", the xxh3 checksum of the body in hex, "\n",
// then the body: records "<tag> <length>\n<bytes>\n". Plain text around
// length-prefixed payloads, so that `head` shows what an entry is and any
// byte may appear in a payload.
//
//===----------------------------------------------------------------------===//
#include "kiln/Compiler/DiskCache.h"
#include "kiln/runtime/Error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/BLAKE3.h"
#include "llvm/Support/xxhash.h"

#include <fmt/core.h>

#include <sstream>
#include <string_view>

namespace kiln {

static const char kMagic[] = "kiln-cache 1\n";

std::string contentHash(std::string_view text) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : llvm::BLAKE3::hash(llvm::arrayRefFromStringRef(
           llvm::StringRef(text.data(), text.size())))) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

//===-- Encoding ----------------------------------------------------------===//

namespace {
class Writer {
public:
  void put(const std::string &tag, const std::string &payload) {
    body += tag + " " + std::to_string(payload.size()) + "\n";
    body += payload;
    body += "\n";
  }
  std::string body;
};

class Reader {
public:
  explicit Reader(std::string_view body) : body_(body) {}
  bool next(std::string &tag, std::string_view &payload) {
    if (pos_ >= body_.size())
      return false;
    size_t nl = body_.find('\n', pos_);
    size_t sp = body_.find(' ', pos_);
    if (nl == std::string::npos || sp == std::string::npos || sp > nl)
      throw Error("kiln cache entry: malformed record header");
    tag = std::string(body_.substr(pos_, sp - pos_));
    size_t len = std::stoull(std::string(body_.substr(sp + 1, nl - sp - 1)));
    if (nl + 1 + len + 1 > body_.size() || body_[nl + 1 + len] != '\n')
      throw Error("kiln cache entry: record " + tag + " is truncated");
    payload = body_.substr(nl + 1, len);
    pos_ = nl + 1 + len + 1;
    return true;
  }

private:
  std::string_view body_;
  size_t pos_ = 0;
};

DType dtypeField(const std::string &s) {
  auto t = parseDType(s);
  if (!t)
    throw Error("kiln cache entry: unknown dtype " + s);
  return *t;
}

} // namespace

std::string encodeCompiledKernel(const CompiledKernel &k,
                                 const std::string &key) {
  Writer w;
  if (!key.empty()) {
    w.put("key", key);
    w.put("build", compilerBuildId());
  }
  w.put("name", k.name);
  w.put("arch", k.arch);
  w.put("grid",
        k.grid[0].str() + " " + k.grid[1].str() + " " + k.grid[2].str());
  w.put("threads", std::to_string(k.threads));
  w.put("shared_bytes", std::to_string(k.sharedBytes));
  w.put("persistent", k.persistent ? "1" : "0");
  w.put("tile_counter", k.tileCounter ? "1" : "0");
  w.put("overlap_previous", k.overlapPrevious ? "1" : "0");
  w.put("compile_ms", fmt::format("{:.3f}", k.compileMs));
  for (const ParamInfo &p : k.params)
    w.put("param", p.name + " " +
                       (p.kind == ParamInfo::Kind::Pointer ? "ptr" : "scalar") +
                       " " + dtypeName(p.dtype) + " " +
                       scalarClassName(p.assumed) + " " +
                       std::to_string(p.multipleOf));
  for (const TensorParamInfo &t : k.tensors) {
    std::vector<int64_t> strides(t.strideParams.begin(), t.strideParams.end());
    w.put("tensor",
          t.name + " " + dtypeName(t.dtype) + " " + joinInts(t.shape) + " " +
              std::to_string(t.pointerParam) + " " + joinInts(strides) +
              (t.aligned         ? " aligned"
               : t.specialisable ? " any"
                                 : " never") +
              (t.contiguous ? "-contiguous" : "") +
              (t.dimParams.empty()
                   ? std::string()
                   : " " + joinInts(std::vector<int64_t>(t.dimParams.begin(),
                                                         t.dimParams.end()))));
  }
  for (const TensorMapInfo &t : k.tensorMaps)
    w.put("tensor_map", t.str());
  for (const std::string &line : k.report)
    w.put("report", line);
  for (const CompileStage &s : k.stages) {
    w.put("stage", fmt::format("{} {:.3f}", s.name, s.ms));
    if (!s.text.empty())
      w.put("stage_text", s.text);
  }
  w.put("kiln_ir", k.kilnIR);
  w.put("layouts", k.layouts);
  w.put("lowered_ir", k.loweredIR);
  w.put("llvm_ir", k.llvmIR);
  w.put("ptx", k.ptx);
  for (const auto &[arch, image] : k.images) {
    w.put("image_" + arch, image.bytes);
    w.put("image_log_" + arch, image.log);
  }
  return kMagic + fmt::format("{:016x}\n", llvm::xxh3_64bits(w.body)) + w.body;
}

std::string resealCacheEntry(std::string_view entry) {
  const size_t head = sizeof(kMagic) - 1 + 17;
  std::string_view body = entry.size() < head ? "" : entry.substr(head);
  return kMagic +
         fmt::format("{:016x}\n", llvm::xxh3_64bits(llvm::StringRef(body))) +
         std::string(body);
}

CompiledKernel decodeCompiledKernel(std::string_view bytes,
                                    std::shared_ptr<const void> owner,
                                    std::string_view expectKey) {
  const size_t magic = sizeof(kMagic) - 1, head = magic + 17;
  if (bytes.size() < head || bytes.compare(0, magic, kMagic) != 0 ||
      bytes[head - 1] != '\n')
    throw Error("kiln cache entry: not a kiln cache file (bad magic)");
  std::string_view body = bytes.substr(head);
  if (fmt::format("{:016x}", llvm::xxh3_64bits(llvm::StringRef(body))) !=
      bytes.substr(magic, 16))
    throw Error("kiln cache entry: checksum mismatch (corrupt entry)");
  // The inspection texts stay in `owner`'s bytes until someone reads them.
  auto text = [&](std::string_view v) {
    return owner ? StageText::mapped(owner, v) : StageText(std::string(v));
  };
  CompiledKernel k;
  bool hasKey = false, hasBuild = false;
  Reader r(body);
  std::string tag;
  std::string_view payload;
  try {
    while (r.next(tag, payload)) {
      // Large payloads (the stages) go straight into their fields.
      bool big = tag == "kiln_ir" || tag == "layouts" || tag == "lowered_ir" ||
                 tag == "llvm_ir" || tag == "ptx" || tag == "stage_text";
      std::string v = big ? std::string() : std::string(payload);
      std::stringstream in(v);
      if (tag == "key" || tag == "build") {
        if (!expectKey.empty() &&
            v != (tag == "key" ? std::string(expectKey) : compilerBuildId()))
          throw Error("kiln cache entry: filed under " + std::string(expectKey) +
                      " but its " + tag + " is " + v);
        (tag == "key" ? hasKey : hasBuild) = true;
      } else if (tag == "name")
        k.name = v;
      else if (tag == "arch")
        k.arch = v;
      else if (tag == "grid") {
        std::string g[3], extra;
        in >> g[0] >> g[1] >> g[2];
        if (g[2].empty() || (in >> extra))
          throw Error("kiln cache entry: bad grid");
        for (int a = 0; a < 3; ++a)
          k.grid[a] = GridExtent::parse(g[a]);
      } else if (tag == "threads")
        k.threads = std::stoi(v);
      else if (tag == "shared_bytes")
        k.sharedBytes = std::stoll(v);
      else if (tag == "persistent")
        k.persistent = v == "1";
      else if (tag == "tile_counter")
        k.tileCounter = v == "1";
      else if (tag == "overlap_previous")
        k.overlapPrevious = v == "1";
      else if (tag == "compile_ms")
        k.compileMs = std::stod(v);
      else if (tag == "param") {
        std::string name, kind, dtype, assumed;
        int64_t multipleOf = 0;
        in >> name >> kind >> dtype >> assumed >> multipleOf;
        ParamInfo p{name,
                    kind == "ptr" ? ParamInfo::Kind::Pointer
                                  : ParamInfo::Kind::Scalar,
                    dtypeField(dtype)};
        std::optional<ScalarClass> c = parseScalarClass(assumed);
        if (!c || multipleOf < 1)
          throw Error("kiln cache entry: bad param record " + v);
        p.assumed = *c;
        p.multipleOf = multipleOf;
        k.params.push_back(std::move(p));
      } else if (tag == "tensor") {
        std::string name, dtype, shape, strides, access, dims;
        int ptr = 0;
        in >> name >> dtype >> shape >> ptr >> strides >> access >> dims;
        const bool contiguous = access.ends_with("-contiguous");
        if (contiguous)
          access.resize(access.size() - std::string("-contiguous").size());
        if (access != "aligned" && access != "any" && access != "never")
          throw Error("kiln cache entry: bad tensor record " + v);
        TensorParamInfo t{name, dtypeField(dtype), splitInts(shape), ptr};
        t.aligned = access == "aligned";
        t.specialisable = access != "never";
        t.contiguous = contiguous;
        for (int64_t s : splitInts(strides))
          t.strideParams.push_back(int(s));
        for (int64_t d : splitInts(dims))
          t.dimParams.push_back(int(d));
        if (!t.dimParams.empty() && t.dimParams.size() != t.shape.size())
          throw Error("kiln cache entry: bad tensor record " + v);
        k.tensors.push_back(std::move(t));
      } else if (tag == "tensor_map") {
        k.tensorMaps.push_back(TensorMapInfo::parse(v));
      } else if (tag == "report") {
        k.report.push_back(v);
      } else if (tag == "stage") {
        CompileStage s;
        in >> s.name >> s.ms;
        k.stages.push_back(std::move(s));
      } else if (tag == "stage_text" && !k.stages.empty())
        k.stages.back().text = text(payload);
      else if (tag == "kiln_ir")
        k.kilnIR = payload;
      else if (tag == "layouts")
        k.layouts = payload;
      else if (tag == "lowered_ir")
        k.loweredIR = text(payload);
      else if (tag == "llvm_ir")
        k.llvmIR = text(payload);
      else if (tag == "ptx")
        k.ptx = payload;
      else if (tag.starts_with("image_log_"))
        k.images[tag.substr(10)].log = payload;
      else if (tag.starts_with("image_"))
        k.images[tag.substr(6)].bytes = payload;
      // Unknown tags are skipped: a newer kiln may add records.
    }
  } catch (const std::logic_error &e) { // stoi and friends
    throw Error("kiln cache entry: bad field " + tag + " (" + e.what() + ")");
  }
  if (k.name.empty() || k.ptx.empty())
    throw Error("kiln cache entry: no kernel name or PTX");
  if (!expectKey.empty() && !(hasKey && hasBuild))
    throw Error("kiln cache entry: it does not record its key and build");
  return k;
}

} // namespace kiln
