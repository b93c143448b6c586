//===- Timing.cpp - back-to-back timing with CUDA events ------------------===//
#include "kiln/runtime/Cuda.h"

#include <algorithm>

namespace kiln::cuda {

double backToBackMs(const std::function<void()> &calls, int samples, int batch,
                    std::vector<float> *all) {
  std::vector<float> times;
  Timer t;
  for (int i = 0; i < samples; ++i) {
    t.start();
    for (int j = 0; j < batch; ++j)
      calls();
    times.push_back(t.stop() / float(batch));
  }
  if (all)
    all->insert(all->end(), times.begin(), times.end());
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

} // namespace kiln::cuda
