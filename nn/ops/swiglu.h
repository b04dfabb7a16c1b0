// SwiGLU gate (mixers.md 2.8): z = silu(a) * b, the middle of the GatedMLP.
// Gradients: written in full (the caller's buffers may hold anything).
#pragma once
#include "autograd/var.h"

namespace hla {
// a, b: (..., I) -> (..., I)
Var swiglu(const Var& a, const Var& b);

namespace cpu {
// a, b, z, dz, da, db: (n); da, db written
template <class T> void swiglu_forward(T* z, const T* a, const T* b, int64_t n);
template <class T> void swiglu_backward(T* da, T* db, const T* dz, const T* a, const T* b, int64_t n);
}  // namespace cpu
}  // namespace hla
