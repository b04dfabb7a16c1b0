// Elementwise arithmetic and shape ops on Vars: add, mul, scale, sum, mean, reshape.
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

}  // namespace hla
