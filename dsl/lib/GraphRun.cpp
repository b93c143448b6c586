//===- GraphRun.cpp - running a lowered graph on the CPU or the GPU -------===//
#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/dsl/Graph.h"
#include "kiln/runtime/Error.h"

namespace kiln::graph {

static TensorRef viewOf(void *data, const Buffer &b, const Shape &view) {
  return {data, b.dtype, view, contiguousStrides(view)};
}

void runOnCpu(const Lowered &plan, std::map<std::string, HostTensor> &tensors) {
  std::vector<HostTensor *> host(plan.buffers.size());
  std::vector<HostTensor> owned;
  owned.reserve(plan.buffers.size());
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const Buffer &b = plan.buffers[i];
    if (b.input) {
      auto it = tensors.find(b.name);
      if (it == tensors.end())
        throw Error("graph run: no tensor for input " + b.name);
      if (it->second.shape() != b.shape || it->second.dtype() != b.dtype)
        throw Error("graph run: input " + b.name + " is " +
                    dtypeName(it->second.dtype()) +
                    shapeToString(it->second.shape()) + ", the graph's is " +
                    dtypeName(b.dtype) + shapeToString(b.shape));
      if (it->second.strides() != contiguousStrides(b.shape))
        throw Error("graph run: input " + b.name + " is not contiguous");
      host[i] = &it->second;
    } else if (b.output) {
      tensors.insert_or_assign(b.name, HostTensor(b.dtype, b.shape));
      host[i] = &tensors.at(b.name);
      host[i]->poison();
    } else {
      owned.emplace_back(b.dtype, b.shape);
      owned.back().poison();
      host[i] = &owned.back();
    }
  }
  for (const Step &s : plan.steps) {
    std::map<std::string, TensorRef> refs;
    for (auto &[param, bv] : s.args)
      refs[param] = viewOf(host[size_t(bv.first)]->data(),
                           plan.buffers[size_t(bv.first)], bv.second);
    kiln::runOnCpu(s.kernel, s.kernel.bind(refs));
  }
}

GpuGraph::GpuGraph(const Lowered &plan) : plan_(plan) {
  for (const Step &s : plan.steps)
    kernels_.push_back(jitKernel(s.kernel));
  arena_ = cuda::Buffer(size_t(plan.arenaBytes));
}

void GpuGraph::launch(const std::map<std::string, TensorRef> &io) {
  std::vector<void *> data(plan_.buffers.size());
  for (size_t i = 0; i < plan_.buffers.size(); ++i) {
    const Buffer &b = plan_.buffers[i];
    if (!b.input && !b.output) {
      data[i] = static_cast<char *>(arena_.data()) + plan_.arenaOffset[i];
      continue;
    }
    auto it = io.find(b.name);
    if (it == io.end())
      throw Error("graph launch: no device tensor for " + b.name);
    if (it->second.shape != b.shape || it->second.dtype != b.dtype ||
        it->second.strides != contiguousStrides(b.shape))
      throw Error("graph launch: " + b.name + " is not a contiguous " +
                  dtypeName(b.dtype) + shapeToString(b.shape));
    data[i] = it->second.data;
  }
  for (size_t k = 0; k < kernels_.size(); ++k) {
    const Step &s = plan_.steps[k];
    std::map<std::string, TensorRef> refs;
    for (auto &[param, bv] : s.args)
      refs[param] = viewOf(data[size_t(bv.first)],
                           plan_.buffers[size_t(bv.first)], bv.second);
    kernels_[k]->launch(s.kernel.bind(refs));
  }
}

} // namespace kiln::graph
