// HGRN / HGRN-2 forget-gate lower bounds (mixers.md section 6), computed once per forward:
//   P    = softmax(lower_bounds, over the layer axis)      (L, D)
//   lb_i = sum_{j=1..i} P_j      (lb_0 = 0), monotone in depth, in [0, 1)
// On both devices, so a GPU step reads nothing back to the host.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/var.h"

namespace hla {
namespace cpu {
// lb, P, z: (L, D); P (the softmax, kept for the backward) in accum_dtype
template <class T>
void lower_bounds_forward(T* lb, T* P, const T* z, int64_t L, int64_t D);
// dz, dlb, P: (L, D); dz written (row 0 of dlb is never read: lb_0 is a constant)
template <class T>
void lower_bounds_backward(T* dz, const T* dlb, const T* P, int64_t L, int64_t D);
}  // namespace cpu

// lower_bounds: (L, D) -> L vectors lb_i of shape (D), views of one (L, D) tensor
std::vector<Var> lower_bounds(const Var& lower_bounds);
}  // namespace hla
