//===- StageDump.cpp - every stage of a compile, written to files ---------===//
#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/DiskCache.h"
#include "kiln/runtime/Error.h"

#include <fmt/core.h>

#include <filesystem>
#include <fstream>

namespace kiln {

static const char *extensionOf(const std::string &stage) {
  if (stage == "ptx")
    return ".ptx";
  if (stage.rfind("llvm-", 0) == 0)
    return ".ll";
  return ".mlir";
}

const std::string &CompiledKernel::textOf(const CompileStage &s) const {
  if (s.name == "kiln")
    return kilnIR;
  if (s.name == "llvm-opt")
    return llvmIR;
  if (s.name == "ptx")
    return ptx;
  return s.text;
}

std::string dumpStages(const CompiledKernel &k, const std::string &dir) {
  std::string folder = fmt::format("{}/{}-{}-{}", dir, k.name, k.arch,
                                   contentHash(k.kilnIR + k.ptx).substr(0, 12));
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec)
    throw Error("KILN_DUMP_DIR: cannot create " + folder + ": " + ec.message());
  auto write = [&](const std::string &file, const std::string &text) {
    std::ofstream out(folder + "/" + file, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out)
      throw Error("KILN_DUMP_DIR: cannot write " + folder + "/" + file);
  };
  std::string times;
  int n = 0;
  for (const CompileStage &s : k.stages) {
    const std::string &text = k.textOf(s);
    std::string file =
        fmt::format("{:02}-{}{}", n++, s.name, extensionOf(s.name));
    if (!text.empty())
      write(file, text);
    times += fmt::format("{:<36} {:9.2f} ms\n", file, s.ms);
  }
  times += fmt::format("{:<36} {:9.2f} ms\n", "total", k.compileMs);
  write("stages.txt", times);
  write("layouts.mlir", k.layouts);
  return folder;
}

} // namespace kiln
