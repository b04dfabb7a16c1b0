// CUDA-event timing (see timer.h). Events bracket each repetition on the default stream, so
// the time is the GPU's, not the host's launch overhead (as long as the GPU is the bottleneck).
#include <algorithm>

#include "cuda/runtime.h"
#include "cuda/timer.h"

namespace hla::cuda {

std::vector<double> time_ms(const std::function<void()>& launch, int warmup, int repeats) {
  for (int i = 0; i < warmup; i++) launch();
  std::vector<cudaEvent_t> events(2 * repeats);
  for (auto& e : events) CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < repeats; i++) {
    CUDA_CHECK(cudaEventRecord(events[2 * i]));
    launch();
    CUDA_CHECK(cudaEventRecord(events[2 * i + 1]));
  }
  CUDA_CHECK(cudaEventSynchronize(events.back()));
  std::vector<double> ms(repeats);
  for (int i = 0; i < repeats; i++) {
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, events[2 * i], events[2 * i + 1]));
    ms[i] = t;
  }
  for (auto& e : events) CUDA_CHECK(cudaEventDestroy(e));
  return ms;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace hla::cuda
