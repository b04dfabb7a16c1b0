// The descriptor of one short convolution call (nn/ops/short_conv.h), shared by the CPU reference
// and cuda/short_conv.cu (a leaf header: it knows nothing of Var).
#pragma once
#include <cstdint>

namespace hla {

enum class ConvAct { Identity, SiLU };  // y = pre or silu(pre)

// x, y: (B, L, C), w: (C, K), state: (B, C, K-1); L is the number of tokens (T in mixers.md).
struct ShortConvDims {
  int64_t B, L, C, K;
  ConvAct act;
};

}  // namespace hla
