// The descriptor of one gate call (nn/ops/gates.h), shared by the CPU reference and cuda/gates.cu
// (a leaf header: it knows nothing of Var).
#pragma once
#include <cstdint>

namespace hla {

// The gate parameterisations of mixers.md 2.11 (the formulas are in nn/ops/gates.h).
enum class GateKind { GLA, HGRN, SSM, LowerBound, RWKV };

// z, g: (N, F); A_log, when present, has H entries, one per block of F / H consecutive channels.
struct GateDims {
  int64_t N, F, H;
  GateKind kind;
  double constant;  // the GLA normalizer or the LowerBound lb (unused by the other kinds)
};

}  // namespace hla
