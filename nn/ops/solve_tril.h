// solve_tril (mixers.md 4.7): A = (I + L)^{-1} for a strictly lower triangular L.
//
// The chunked delta rule inverts one unit lower triangular C x C matrix per chunk (4.6). The
// CUDA kernel follows fla's blocking, so this reference does too:
//   pass 1: invert each 16 x 16 diagonal block by forward substitution. With N = -L_ii and
//           X = (I + L_ii)^{-1} - I:  X[i,:] = N[i,:] + sum_{j<i} N[i,j] X[j,:]   (then add I)
//   pass 2: fill the blocks below the diagonal, row block by row block, by block forward
//           substitution:  A_ij = -A_ii * sum_{j <= m < i} L_im A_mj   (i > j).
//           For two blocks this is the merge
//           [[M11, 0], [M21, M22]]^{-1} = [[M11^-1, 0], [-M22^-1 M21 M11^-1, M22^-1]].
// Exact for any size; the last block may be smaller than 16 (partial chunks).
#pragma once
#include <Eigen/Dense>
#include <algorithm>

namespace hla {

// L: (C, C) strictly lower triangular (the upper triangle and diagonal are ignored).
// Returns A: (C, C) unit lower triangular with (I + L) A = I.
template <class Matrix>
Matrix solve_tril(const Matrix& L, Eigen::Index block = 16) {
  using Eigen::Index;
  const Index C = L.rows();
  Matrix A = Matrix::Zero(C, C);
  // Pass 1: diagonal blocks.
  for (Index b0 = 0; b0 < C; b0 += block) {
    const Index n = std::min(block, C - b0);
    auto X = A.block(b0, b0, n, n);  // X: (n, n), becomes (I + L_ii)^{-1}
    for (Index i = 0; i < n; i++) {
      for (Index j = 0; j < i; j++) X(i, j) = -L(b0 + i, b0 + j);            // N[i,:]
      for (Index j = 0; j < i; j++) X.row(i) -= L(b0 + i, b0 + j) * X.row(j);  // + N[i,j] X[j,:]
    }
    X.diagonal().setOnes();  // + I
  }
  // Pass 2: off-diagonal blocks A_ij, i > j, from the rows already solved above them.
  for (Index i0 = block; i0 < C; i0 += block) {
    const Index ni = std::min(block, C - i0);
    for (Index j0 = 0; j0 < i0; j0 += block) {
      const Index nj = std::min(block, i0 - j0);
      // sum_{j <= m < i} L_im A_mj : rows i0..i0+ni, through rows j0..i0 of A's column block j
      Matrix acc = L.block(i0, j0, ni, i0 - j0) * A.block(j0, j0, i0 - j0, nj);  // (ni, nj)
      A.block(i0, j0, ni, nj) = -A.block(i0, i0, ni, ni) * acc;
    }
  }
  return A;
}

}  // namespace hla
