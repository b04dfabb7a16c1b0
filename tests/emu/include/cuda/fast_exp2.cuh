// Emulated cuda/fast_exp2.cuh: exp2 with results below FLT_MIN flushed to zero, as
// ex2.approx.ftz.f32 does.
#pragma once
#include <cfloat>
#include <cmath>

namespace hla::cuda {

inline float exp2_ftz(float x) {
  const float y = std::exp2(x);
  return y < FLT_MIN ? 0.0f : y;
}

inline float exp_ftz(float x) { return exp2_ftz(x * 1.4426950408889634f); }

}  // namespace hla::cuda
