//===- DeviceTensors.h - host tensors on the GPU, a kernel run on them -*- C++
//-*-===//
#ifndef KILN_TESTS_GPU_DEVICETENSORS_H
#define KILN_TESTS_GPU_DEVICETENSORS_H

#include "kiln/Compiler/Compile.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/HostTensor.h"
#include "kiln/runtime/Launch.h"

#include <map>
#include <string>
#include <vector>

namespace kiln::test {

/// Host tensors mirrored on the device.
struct DeviceTensors {
  std::map<std::string, cuda::Buffer> buffers;
  std::map<std::string, TensorRef> refs;
  void add(const std::string &name, HostTensor &t, bool poison) {
    cuda::Buffer &b = buffers[name] = cuda::Buffer(t.storageBytes());
    if (poison) {
      b.fill(0xFF);
      outputs.push_back(name);
    } else
      b.upload(t.data(), t.storageBytes());
    refs[name] = t.ref();
    refs[name].data = b.data();
  }
  void poisonOutputs() {
    for (const std::string &name : outputs)
      buffers.at(name).fill(0xFF);
  }
  std::vector<std::string> outputs;
  void download(const std::string &name, HostTensor &t) {
    buffers.at(name).download(t.data(), t.storageBytes());
  }
};

/// `launches` launches of one loaded kernel, the outputs poisoned before
/// each: the last one's results are checked (dynamic tiles: the module's
/// tile counter must be back at zero after every launch).
/// Each tensor specialised as aligned or not on its own (unalignedTensors).
/// The kernel binds the tensors it takes (Kernel::tensorsIn), so one set of
/// tensors serves each kernel of a sequence (split keys: the split kernel
/// takes no O or LSE). Returns the compiled kernel, for its report.
inline CompiledKernel runOnGpu(const Kernel &k, DeviceTensors &dt,
                               int launches = 1) {
  const std::map<std::string, TensorRef> in = k.tensorsIn(dt.refs);
  CompiledKernel c = compileForGpu(
      k, variantTarget(k, in, {}, {.arch = cuda::device().arch()}));
  GpuKernel g(c.spec());
  for (int i = 0; i < launches; ++i) {
    if (i)
      dt.poisonOutputs();
    g.launch(k.bind(in));
    cuda::synchronize();
  }
  return c;
}

} // namespace kiln::test

#endif // KILN_TESTS_GPU_DEVICETENSORS_H
