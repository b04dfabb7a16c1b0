// Pointwise functions the layers need: silu, sigmoid, softplus (threshold 20, as PyTorch and
// fla), logsigmoid, tanh, relu^2 (RWKV-6 channel mix), 1 - exp(x) (HGRN input gate, HGRN-2 key),
// -exp(x) (RWKV-6 decay). One shared kernel, a table of (f, f').
// Gradients: written in full (the caller's buffers may hold anything).
#pragma once
#include "autograd/var.h"
#include "nn/ops/activation_dims.h"

namespace hla {

const char* activation_name(Activation a);

Var activation(const Var& x, Activation kind);
inline Var silu(const Var& x) { return activation(x, Activation::SiLU); }
inline Var sigmoid(const Var& x) { return activation(x, Activation::Sigmoid); }
inline Var softplus(const Var& x) { return activation(x, Activation::Softplus); }
inline Var logsigmoid(const Var& x) { return activation(x, Activation::LogSigmoid); }
inline Var tanh(const Var& x) { return activation(x, Activation::Tanh); }
inline Var relu_squared(const Var& x) { return activation(x, Activation::ReluSquared); }
inline Var one_minus_exp(const Var& x) { return activation(x, Activation::OneMinusExp); }
inline Var neg_exp(const Var& x) { return activation(x, Activation::NegExp); }

namespace cpu {
// x, y, dx, dy: (n)
template <class T> void activation_forward(T* y, const T* x, int64_t n, Activation kind);
template <class T> void activation_backward(T* dx, const T* dy, const T* x, int64_t n, Activation kind);
}  // namespace cpu

}  // namespace hla
