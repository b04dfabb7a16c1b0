// The scalar functions several CPU references share (activation, gated_norm, gates, short_conv,
// swiglu), in the op's type T. The CUDA kernels keep their fp32 forms beside their kernels.
#pragma once
#include <cmath>

namespace hla::cpu {

// s(v) = 1 / (1 + e^-v)
template <class T> T sigmoid_of(T v) { return T(1) / (T(1) + std::exp(-v)); }
// softplus with PyTorch's / fla's threshold: v for v > 20
template <class T> T softplus_of(T v) { return v > T(20) ? v : std::log1p(std::exp(v)); }

}  // namespace hla::cpu
