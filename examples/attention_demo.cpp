//===- attention_demo.cpp - flash attention from the DSL, end to end
//-------===//
//
// Builds the flash-attention forward kernel (kernels/attention/Forward.cpp)
// for one shape, shows the kiln IR it compiles to, runs it (JIT-compiled on
// the GPU when there is one, else on the CPU reference executor) and checks
// it against an fp64 reference.
//
// usage: attention-demo [seq] [head-dim] [causal: 0|1]
//
//===----------------------------------------------------------------------===//
#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/kernels/Attention.h"
#include "kiln/kernels/Reference.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

using namespace kiln;

int main(int argc, char **argv) try {
  kernels::AttentionShape s;
  s.batch = 1;
  s.heads = 4;
  s.seqQ = s.seqK = argc > 1 ? std::atoll(argv[1]) : 333;
  s.headDim = argc > 2 ? std::atoll(argv[2]) : 64;
  s.causal = argc > 3 ? std::atoi(argv[3]) != 0 : true;
  s.dtype = DType::bf16;

  Kernel k = kernels::attentionForward(s);
  std::printf("flash attention forward: B=%lld H=%lld N=%lld D=%lld %s bf16\n",
              (long long)s.batch, (long long)s.heads, (long long)s.seqQ,
              (long long)s.headDim, s.causal ? "causal" : "non-causal");
  std::printf("grid %s programs, %zu parameters\n\n",
              describeGrid(k.grid(), k.params()).c_str(), k.params().size());

  // The loop body of the kiln IR: what one program runs per K/V block.
  std::istringstream ir(k.ir());
  std::string line;
  bool inLoop = false;
  std::printf("kiln IR, the online-softmax loop:\n");
  while (std::getline(ir, line)) {
    inLoop |= line.find("scf.for") != std::string::npos;
    if (inLoop)
      std::printf("%s\n", line.c_str());
    if (inLoop && line.find("scf.yield") != std::string::npos)
      break;
  }

  HostTensor q(s.dtype, {s.batch, s.heads, s.seqQ, s.headDim});
  HostTensor kk(s.dtype, {s.batch, s.heads, s.seqK, s.headDim});
  HostTensor v(s.dtype, {s.batch, s.heads, s.seqK, s.headDim});
  HostTensor o(s.dtype, q.shape()), lse(DType::f32, {s.batch, s.heads, s.seqQ});
  q.fillRandom(1, -2, 2);
  kk.fillRandom(2, -2, 2);
  v.fillRandom(3);
  o.poison();
  lse.poison();

  std::map<std::string, TensorRef> host = {{"Q", q.ref()},
                                           {"K", kk.ref()},
                                           {"V", v.ref()},
                                           {"O", o.ref()},
                                           {"LSE", lse.ref()}};
  std::string why;
  double ms = 0;
  if (cuda::available(&why)) {
    // JIT-compile for this GPU, run, and copy the outputs back.
    const cuda::DeviceInfo &dev = cuda::device();
    std::printf("\nrunning on %s (%s)\n", dev.name.c_str(), dev.arch().c_str());
    std::map<std::string, cuda::Buffer> buffers;
    std::map<std::string, TensorRef> refs;
    for (auto &[name, ref] : host) {
      HostTensor &t = name == "Q"   ? q
                      : name == "K" ? kk
                      : name == "V" ? v
                      : name == "O" ? o
                                    : lse;
      buffers[name] = cuda::Buffer(t.storageBytes());
      buffers[name].upload(t.data(), t.storageBytes()); // O, LSE: NaN poison
      refs[name] = ref;
      refs[name].data = buffers[name].data();
    }
    std::shared_ptr<GpuKernel> gpu =
        jitKernel(k, refs, {}, GpuTarget{.arch = dev.arch()});
    auto args = k.bind(refs);
    gpu->launch(args); // warm-up
    cuda::Timer timer;
    timer.start();
    gpu->launch(args);
    ms = timer.stop();
    buffers["O"].download(o.data(), o.storageBytes());
    buffers["LSE"].download(lse.data(), lse.storageBytes());
    std::printf("GPU run %.3f ms\n", ms);
  } else {
    std::printf("\nno GPU here (%s): running the CPU reference executor\n",
                why.c_str());
    auto t0 = std::chrono::steady_clock::now();
    runOnCpu(k, k.bind(host));
    ms = std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
             .count();
    std::printf("CPU run %.1f ms\n", ms);
  }

  HostTensor oRef(DType::f32, o.shape()), lseRef(DType::f32, lse.shape());
  kernels::attentionReference(s, q, kk, v, oRef, lseRef);
  ErrorStats eo = compareTensors(o, oRef), el = compareTensors(lse, lseRef);
  std::printf("O   vs fp64 reference: max abs %.3e, relative %.3e\n", eo.maxAbs,
              eo.relative);
  std::printf("LSE vs fp64 reference: max abs %.3e, relative %.3e\n", el.maxAbs,
              el.relative);
  bool ok = eo.relative <= 1e-2 && el.relative <= 1e-4;
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
} catch (const kiln::Error &e) {
  std::fprintf(stderr, "attention-demo: error: %s\n", e.what());
  return 2;
}
