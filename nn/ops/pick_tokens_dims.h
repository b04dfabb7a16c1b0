// The sampling settings of a token pick (nn/ops/pick_tokens.h), shared by the CPU reference and
// cuda/pick_tokens.cu (a leaf header: it knows nothing of Tensor or Var).
#pragma once

namespace hla {

struct SampleParams {
  double temperature = 1.0;  // > 0
  int top_k = 0;             // 0: every id below the width
  double top_p = 1.0;        // in (0, 1]
};

// The largest top_k the GPU ranks itself (k block-wide argmax rounds); beyond it, and for 0,
// the caller samples with the CPU reference.
constexpr int kMaxDeviceTopK = 1024;

}  // namespace hla
