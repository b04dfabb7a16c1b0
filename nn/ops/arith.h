// Elementwise arithmetic and shape ops on Vars: add, mul, scale, sum, mean, reshape, split_last,
// concat0, and the broadcasts over the last dimension that layers need (per-channel scale and bias).
// They run on any device through tensor/math.h (the broadcasts and split_last through their own
// kernels, cpu:: in arith.cpp and cuda/arith.cu). Gradients: written in full.
#pragma once
#include "autograd/var.h"

namespace hla {

Var add(const Var& a, const Var& b);  // same shapes
Var mul(const Var& a, const Var& b);  // same shapes
Var scale(const Var& a, double s);
Var sum(const Var& a);   // all elements -> shape {}
Var mean(const Var& a);  // all elements -> shape {}
Var reshape(const Var& a, const Shape& shape);
// Broadcasts: x viewed as (outer, S, inner) with s of S elements, y[o, i, j] = x[o, i, j] (*|+) s[i].
// outer = x.numel() / (S * inner). Examples: a per-channel weight (inner = 1), a per-token
// scalar times a head vector (outer = 1, inner = P), a per-head scalar (S = H, inner = P).
Var mul_broadcast(const Var& x, const Var& s, int64_t inner);
Var add_broadcast(const Var& x, const Var& s, int64_t inner);
inline Var mul_rows(const Var& x, const Var& w) { return mul_broadcast(x, w, 1); }  // x (..., C) * w (C)
inline Var add_rows(const Var& x, const Var& w) { return add_broadcast(x, w, 1); }  // x (..., C) + w (C)
Var scale_by(const Var& x, const Var& s);  // y = s * x for a one-element s (a learned scalar)
// Splits the last dimension into pieces of the given widths (they must add up to it).
std::vector<Var> split_last(const Var& x, const std::vector<int64_t>& widths);
// Stacks Vars along the first dimension (the others equal), e.g. two projections' weights for one
// GEMM; each piece's gradient is its rows of the result's.
Var concat0(const std::vector<Var>& xs);

}  // namespace hla
