//===- GraphRun.cpp - running a lowered graph on the CPU or the GPU -------===//
#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/dsl/Graph.h"
#include "kiln/runtime/Error.h"

namespace kiln::graph {

/// A graph input or output as the caller passed it: the graph's dtype and
/// shape, contiguous.
static void checkIo(const Buffer &b, const TensorRef &t, const char *what) {
  if (t.shape != b.shape || t.dtype != b.dtype ||
      t.strides != contiguousStrides(b.shape))
    throw Error(std::string(what) + ": " + b.name + " is " +
                dtypeName(t.dtype) + shapeToString(t.shape) +
                ", the graph's is a contiguous " + dtypeName(b.dtype) +
                shapeToString(b.shape));
}

/// The arguments of one step, each buffer at data[buffer] seen through the
/// step's view of it.
static std::vector<ArgValue> argsOf(const Lowered &plan, const Step &s,
                                    const std::vector<void *> &data) {
  std::map<std::string, TensorRef> refs;
  for (auto &[param, bv] : s.args)
    refs[param] = {data[size_t(bv.first)], plan.buffers[size_t(bv.first)].dtype,
                   bv.second, contiguousStrides(bv.second)};
  return s.kernel.bind(refs);
}

void runOnCpu(const Lowered &plan, std::map<std::string, HostTensor> &tensors) {
  std::vector<void *> data(plan.buffers.size());
  std::vector<HostTensor> owned;
  owned.reserve(plan.buffers.size());
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const Buffer &b = plan.buffers[i];
    if (b.input) {
      auto it = tensors.find(b.name);
      if (it == tensors.end())
        throw Error("graph run: no tensor for input " + b.name);
      checkIo(b, it->second.ref(), "graph run");
      data[i] = it->second.data();
      continue;
    }
    HostTensor &t =
        b.output
            ? tensors.insert_or_assign(b.name, HostTensor(b.dtype, b.shape))
                  .first->second
            : owned.emplace_back(b.dtype, b.shape);
    t.poison();
    data[i] = t.data();
  }
  for (const Step &s : plan.steps)
    kiln::runOnCpu(s.kernel, argsOf(plan, s, data));
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
    checkIo(b, it->second, "graph launch");
    data[i] = it->second.data;
  }
  for (size_t k = 0; k < kernels_.size(); ++k)
    kernels_[k]->launch(argsOf(plan_, plan_.steps[k], data));
}

} // namespace kiln::graph
