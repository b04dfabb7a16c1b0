// The descriptor of one gated RMSNorm call (nn/ops/gated_norm.h), shared by the CPU reference
// and cuda/gated_norm.cu (a leaf header: it knows nothing of Var).
#pragma once
#include <cstdint>

namespace hla {

enum class GateAct { Swish, Sigmoid };                // act(z) = z * sigmoid(z) or sigmoid(z)
enum class GateOrder { NormThenGate, GateThenNorm };  // y = RMSNorm(x) * w * act(z), or RMSNorm(x * act(z)) * w

// N rows of C channels, normalised in groups of G consecutive channels (G divides C).
struct GatedNormDims {
  int64_t N, C, G;
  double eps;
  GateAct act;
  GateOrder order;
};

}  // namespace hla
