//===- Autotuned.cpp - any kernel, a list of Configs, tuned on use -------===//
#include "kiln/Compiler/Autotuned.h"

#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"
#include "kiln/runtime/HostTensor.h"

namespace kiln {

namespace {

/// A host copy of a device tensor, strides kept.
HostTensor download(const TensorRef &t) {
  HostTensor h(t.dtype, t.shape, t.strides);
  // Its storage covers exactly the elements the strides reach.
  cuda::copyToHost(h.data(), t.data, h.storageBytes());
  return h;
}

} // namespace

AutotunedKernel::AutotunedKernel(std::string name,
                                 std::vector<std::string> configs,
                                 std::function<Kernel(size_t)> build,
                                 Options options)
    : name_(std::move(name)), configs_(std::move(configs)),
      build_(std::move(build)), options_(std::move(options)) {
  if (configs_.empty())
    throw Error("AutotunedKernel " + name_ + ": no Configs to choose from");
  for (size_t i = 0; i < configs_.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (configs_[i] == configs_[j])
        throw Error("AutotunedKernel " + name_ + ": two Configs named '" +
                    configs_[i] + "'");
}

const Kernel &AutotunedKernel::kernel(size_t i) {
  auto it = kernels_.find(i);
  if (it == kernels_.end())
    it = kernels_.emplace(i, build_(i)).first;
  return it->second;
}

std::optional<std::string>
AutotunedKernel::chosen(const std::string &key) const {
  auto it = chosen_.find(key);
  if (it == chosen_.end())
    return std::nullopt;
  return configs_[it->second];
}

size_t AutotunedKernel::tune(const std::string &key,
                             const std::map<std::string, TensorRef> &tensors,
                             const std::map<std::string, int64_t> &scalars) {
  for (const std::string &out : options_.outputs)
    if (!tensors.count(out))
      throw Error("AutotunedKernel " + name_ + ": output " + out +
                  " is not among the tensors");
  // The reference: what the first Config writes.
  std::shared_ptr<GpuKernel> first =
      jitKernel(kernel(0), tensors, scalars, {.arch = cuda::device().arch()});
  first->launch(kernel(0).bind(tensors, scalars));
  cuda::synchronize();
  std::map<std::string, HostTensor> reference;
  for (const std::string &out : options_.outputs)
    reference.emplace(out, download(tensors.at(out)));

  std::vector<TuneCandidate> candidates;
  for (size_t i = 0; i < configs_.size(); ++i)
    candidates.push_back({configs_[i], 0, 0, [this, i] { return build_(i); }});
  TuneHarness harness;
  harness.sets = 1;
  harness.args = [&](const Kernel &k, int) { return k.bind(tensors, scalars); };
  harness.unalignedTensors = unalignedTensors(kernel(0), tensors);
  harness.target = [&](const Kernel &k) {
    return variantTarget(k, tensors, scalars);
  };
  harness.check = [&](const Kernel &k, GpuKernel &g) -> std::string {
    g.launch(k.bind(tensors, scalars));
    cuda::synchronize();
    for (auto &[out, ref] : reference) {
      ErrorStats e = compareTensors(download(tensors.at(out)), ref);
      if (e.nonFinite || !(e.relative <= options_.tolerance))
        return out + ": relative error " + std::to_string(e.relative) +
               " against the first Config's output";
    }
    return "";
  };
  lastTuning_ = autotune(name_, key, "any", std::move(candidates), harness,
                         options_.tune);
  for (size_t i = 0; i < configs_.size(); ++i)
    if (configs_[i] == lastTuning_->config)
      return i;
  throw InternalError("AutotunedKernel " + name_ + ": the tuner chose '" +
                      lastTuning_->config + "', not one of the Configs");
}

void AutotunedKernel::launch(const std::string &key,
                             const std::map<std::string, TensorRef> &tensors,
                             const std::map<std::string, int64_t> &scalars,
                             const LaunchOptions &launch) {
  auto it = chosen_.find(key);
  if (it != chosen_.end()) {
    lastSource_ = "memo";
  } else {
    std::optional<size_t> index;
    // TuneOptions::force: tune even when the database has a record.
    if (auto recorded =
            options_.tune.force ? std::nullopt : tunedConfig(name_, key, "any"))
      for (size_t i = 0; i < configs_.size(); ++i)
        if (configs_[i] == *recorded)
          index = i;
    lastSource_ = index ? "database" : "tuned";
    if (!index)
      index = tune(key, tensors, scalars);
    it = chosen_.emplace(key, *index).first;
  }
  const Kernel &k = kernel(it->second);
  Loaded &l = loaded_[key];
  std::vector<int64_t> signature;
  for (const auto &[name, t] : tensors) {
    signature.push_back(int64_t(reinterpret_cast<uintptr_t>(t.data) % 16));
    signature.insert(signature.end(), t.shape.begin(), t.shape.end());
    signature.insert(signature.end(), t.strides.begin(), t.strides.end());
  }
  for (const auto &[name, v] : scalars)
    signature.push_back(v);
  if (!l.kernel || signature != l.signature) {
    GpuTarget target =
        variantTarget(k, tensors, scalars, {.arch = cuda::device().arch()});
    const std::string variant = specialisationKey(target);
    if (!l.kernel || l.variant != variant) {
      l.kernel = jitKernel(k, target);
      l.variant = variant;
    }
    l.signature = std::move(signature);
  }
  l.kernel->launch(k.bind(tensors, scalars), launch);
}

} // namespace kiln
