// Elementwise arithmetic and shape ops on Vars: add, mul, scale, sum, mean, reshape, and
// the broadcasts over the last dimension that layers need (per-channel scale and bias).
// They run on any device through tensor/math.h.
#pragma once
#include "autograd/var.h"

namespace hla {

Var add(const Var& a, const Var& b);  // same shapes
Var mul(const Var& a, const Var& b);  // same shapes
Var scale(const Var& a, double s);
Var sum(const Var& a);   // all elements -> shape {}
Var mean(const Var& a);  // all elements -> shape {}
Var reshape(const Var& a, const Shape& shape);
// Broadcast over the last dimension: x (..., C) with w (C).
Var mul_rows(const Var& x, const Var& w);  // y = x * w
Var add_rows(const Var& x, const Var& w);  // y = x + w
Var scale_by(const Var& x, const Var& s);  // y = s * x for a one-element s (a learned scalar)

}  // namespace hla
