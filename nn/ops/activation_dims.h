// The activation kinds of nn/ops/activation.h, shared by the CPU reference and cuda/activation.cu
// (a leaf header: it knows nothing of Var).
#pragma once

namespace hla {

enum class Activation { SiLU, Sigmoid, Softplus, LogSigmoid, Tanh, ReluSquared, OneMinusExp, NegExp };

}  // namespace hla
