// GPU timing with CUDA events, for `hla bench`: warm-up launches, then each repetition timed
// on its own, and the times (ms) returned so the caller can take the median.
#pragma once
#include <functional>
#include <vector>

namespace hla::cuda {
std::vector<double> time_ms(const std::function<void()>& launch, int warmup, int repeats);
double median(std::vector<double> values);
}  // namespace hla::cuda
