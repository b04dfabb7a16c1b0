// The diagonal-decay chunk algorithm for one head (mixers.md 4.1, 4.3, 4.8-4.10), shared by
// decay_attention (o_t reads S_t) and rwkv6 (o_t reads S_{t-1}, plus the bonus u), and the
// per-head copies between the (B, T, heads, width) layout and contiguous Eigen matrices.
//
// Both ops run the recurrence S_t = Diag(exp(g_t)) S_{t-1} + k_t v_t^T. Cut into chunks of C
// tokens, with G_t = g_{c0} + ... + g_t the inclusive cumulative log gate inside the chunk and
// h = the state at the chunk's start, every token of the chunk reads (mixers.md 4.3 and 11):
//   o_t    = scale * ( h^T (q_t * exp(Gq_t))  +  sum_{s <= t} A[t,s] v_s )
//   A[t,s] = sum_d q_t[d] k_s[d] exp(Gq_t[d] - G_s[d])          s < t
//   A[t,t] = sum_d q_t[d] k_t[d] bonus[d]
//   S_end  = Diag(exp(G_last)) h + sum_s (k_s * exp(G_last - G_s)) v_s^T
// decay attention (ReadAt::after_update):  Gq_t = G_t         bonus = 1  (exp(G_t - G_t) = 1)
// RWKV-6          (ReadAt::before_update): Gq_t = G_t - g_t   bonus = u  (the current token is
//                                          not yet in the state; it enters only through u)
// Within a chunk all of this is matrix products over the C x C scores A (parallel over tokens);
// only the chunk-start states h[n] are carried from chunk to chunk. This is the algorithm the
// CUDA chunk kernels follow. Left out on the CPU: the 16-token sub-chunks of 4.4, which only
// exist to turn vector-gate scores into tensor-core matmuls; here those scores are formed pair
// by pair. Every exp() below has an exponent <= 0: pairs s > t are skipped (masked) before
// exponentiating, and the cumulative gates restart at every chunk.
//
// Gates travel as (T, dk) matrices: a scalar gate is repeated over dk when gathered and its
// gradient summed over dk when scattered. The VectorGate flag only chooses how A is formed:
// a scalar gate gives A = (Q K^T) (.) Gamma, one matmul, as in the CUDA kernel.
#pragma once
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace hla {
namespace decay_chunk {

template <class Real> using Mat = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class Real> using Row = Eigen::Matrix<Real, 1, Eigen::Dynamic>;

// ---- Layout: one (batch, head) slice <-> a contiguous matrix ----

// x: (B, T, heads, width) -> rows x[b, t, head, :] for t = 0..T-1: (T, width)
template <class Real>
Mat<Real> gather_head(const Real* x, int64_t b, int64_t head, int64_t T, int64_t heads, int64_t width) {
  Mat<Real> m(T, width);
  for (int64_t t = 0; t < T; t++)
    for (int64_t c = 0; c < width; c++) m(t, c) = x[((b * T + t) * heads + head) * width + c];
  return m;
}

// x[b, :, head, :] += m   (x: (B, T, heads, width), m: (T, width)); += so that value heads
// sharing one q/k head sum their gradients.
template <class Real>
void scatter_head_add(Real* x, const Mat<Real>& m, int64_t b, int64_t head, int64_t heads) {
  const int64_t T = m.rows(), width = m.cols();
  for (int64_t t = 0; t < T; t++)
    for (int64_t c = 0; c < width; c++) x[((b * T + t) * heads + head) * width + c] += m(t, c);
}

// s: (B, heads, dk, dv) -> s[b, head]: (dk, dv); a null s is the zero state.
template <class Real>
Mat<Real> gather_state(const Real* s, int64_t b, int64_t head, int64_t heads, int64_t dk, int64_t dv) {
  if (!s) return Mat<Real>::Zero(dk, dv);
  return Eigen::Map<const Mat<Real>>(s + (b * heads + head) * dk * dv, dk, dv);
}

template <class Real>
void scatter_state(Real* s, const Mat<Real>& m, int64_t b, int64_t head, int64_t heads) {
  Eigen::Map<Mat<Real>>(s + (b * heads + head) * m.size(), m.rows(), m.cols()) = m;
}

// g: (B, T, heads) scalar or (B, T, heads, dk) vector -> (T, dk)
template <class Real, bool VectorGate>
Mat<Real> gather_gate(const Real* g, int64_t b, int64_t head, int64_t T, int64_t heads, int64_t dk) {
  if constexpr (VectorGate) return gather_head(g, b, head, T, heads, dk);
  else return gather_head(g, b, head, T, heads, 1).replicate(1, dk);
}

// dg_head: (T, dk) per channel -> dg (like g); a scalar gate gets the sum over channels.
template <class Real, bool VectorGate>
void scatter_gate_grad(Real* dg, const Mat<Real>& dg_head, int64_t b, int64_t head, int64_t heads) {
  if constexpr (VectorGate) scatter_head_add(dg, dg_head, b, head, heads);
  else scatter_head_add(dg, Mat<Real>(dg_head.rowwise().sum()), b, head, heads);
}

// ---- One head's sequence ----

template <class Real>
struct Head {
  Mat<Real> q, k;     // (T, dk)   (RWKV-6: q is the receptance r)
  Mat<Real> v;        // (T, dv)
  Mat<Real> g;        // (T, dk)   per-step log gate (RWKV-6: w)
  Row<Real> bonus;    // (dk)      diagonal weight of A: ones, or RWKV-6's u
  Mat<Real> s0;       // (dk, dv)  initial state
  const int32_t* doc_start = nullptr;    // (T) this row's first token of each token's document, or null
  const int32_t* chunk_reset = nullptr;  // (T / C) this row's chunks that start a document, or null

  // Whether the state is zeroed before token t: a packed document starts there (t = 0 starts from s0).
  bool starts_document(int64_t t) const { return doc_start && t > 0 && doc_start[t] == t; }
  // Whether the state entering chunk n is zeroed (the chunked form on the documents' chunk layout).
  bool resets_chunk(size_t n) const { return chunk_reset && chunk_reset[n]; }
};

template <class Real>
struct HeadGrads {
  Mat<Real> dq, dk, dv, dg;  // like q, k, v, g of Head
  Row<Real> dbonus;          // (dk)
  Mat<Real> ds0;             // (dk, dv)
};

// One token of the recurrence, in place: S <- Diag(exp(g_t)) S + k_t v_t^T. decay: (dk), the
// caller's buffer, so that a token loop allocates nothing.
template <class Real>
void advance_state(Mat<Real>& S, Row<Real>& decay, const Head<Real>& x, int64_t t) {
  decay = x.g.row(t).array().exp();                    // exp(g_t): (dk)
  S = decay.asDiagonal() * S;                          // Diag(exp(g_t)) S_{t-1}
  S.noalias() += x.k.row(t).transpose() * x.v.row(t);  //   + k_t v_t^T
}

// The state token t starts from, given S[t] = the state after t tokens: `zero` (dk x dv zeros)
// where a packed document starts at t.
template <class Real>
const Mat<Real>& state_before(const std::vector<Mat<Real>>& S, const Mat<Real>& zero, const Head<Real>& x,
                              int64_t t) {
  return x.starts_document(t) ? zero : S[t];
}

// Every state of the recurrence, for the token-level backward: S[t] = the state after t
// tokens, t = 0..T (S[0] = the initial state).
template <class Real>
std::vector<Mat<Real>> replay_states(const Head<Real>& x) {
  std::vector<Mat<Real>> S{x.s0};
  const Mat<Real> zero = Mat<Real>::Zero(x.s0.rows(), x.s0.cols());
  Row<Real> decay(x.g.cols());
  for (int64_t t = 0; t < x.q.rows(); t++) {
    Mat<Real> next = state_before(S, zero, x, t);
    advance_state(next, decay, x, t);
    S.push_back(std::move(next));
  }
  return S;
}

// Where o_t reads the state: the one difference between the two ops (see the top).
enum class ReadAt { after_update, before_update };

struct Chunk {
  int64_t begin, len;
  int64_t last() const { return begin + len - 1; }
};

// Chunks of C tokens covering 0..T-1; the last one may be partial.
inline std::vector<Chunk> split_chunks(int64_t T, int64_t C) {
  std::vector<Chunk> chunks;
  for (int64_t begin = 0; begin < T; begin += C) chunks.push_back({begin, std::min(C, T - begin)});
  return chunks;
}

// In-chunk cumulative log gates (4.1). gk: G_t, the key side and the state update; gq: the
// query side, G_t (after_update) or the exclusive G_t - g_t (before_update).
template <class Real>
struct CumGates {
  Mat<Real> gk;  // (T, dk)
  Mat<Real> gq;  // (T, dk)
};

template <class Real>
CumGates<Real> cumulative_gates(const Mat<Real>& g, const std::vector<Chunk>& chunks, ReadAt read) {
  CumGates<Real> G;
  G.gk.resize(g.rows(), g.cols());
  for (const Chunk& c : chunks) {
    G.gk.row(c.begin) = g.row(c.begin);  // the cumsum restarts at every chunk
    for (int64_t t = c.begin + 1; t <= c.last(); t++) G.gk.row(t) = G.gk.row(t - 1) + g.row(t);
  }
  G.gq = read == ReadAt::after_update ? G.gk : Mat<Real>(G.gk - g);
  return G;
}

// exp(G_last - G_s) for the rows s of chunk c: how much of token s survives to the chunk's end.
template <class Real>
Mat<Real> decay_to_end(const CumGates<Real>& G, const Chunk& c) {
  return (G.gk.row(c.last()).replicate(c.len, 1) - G.gk.middleRows(c.begin, c.len)).array().exp();
}

// exp(Gq_t) for the rows t of chunk c: how much of the chunk-start state token t reads.
template <class Real>
Mat<Real> decay_from_start(const CumGates<Real>& G, const Chunk& c) {
  return G.gq.middleRows(c.begin, c.len).array().exp();
}

// q_t * exp(Gq_t) for the rows of chunk c: the queries as seen from the chunk-start state.
template <class Real>
Mat<Real> queries_from_start(const Head<Real>& x, const CumGates<Real>& G, const Chunk& c) {
  return x.q.middleRows(c.begin, c.len).cwiseProduct(decay_from_start(G, c));
}

// Scalar gate: Gamma[t,s] = exp(Gq_t - G_s) for s < t, else 0 (masked before exp). (len, len)
template <class Real>
Mat<Real> scalar_decay_matrix(const CumGates<Real>& G, const Chunk& c) {
  Mat<Real> gamma = Mat<Real>::Zero(c.len, c.len);
  for (int64_t t = 0; t < c.len; t++)
    for (int64_t s = 0; s < t; s++) gamma(t, s) = std::exp(G.gq(c.begin + t, 0) - G.gk(c.begin + s, 0));
  return gamma;
}

// The scores A of chunk c (len, len), lower triangular, as defined at the top.
template <class Real, bool VectorGate>
Mat<Real> chunk_scores(const Head<Real>& x, const CumGates<Real>& G, const Chunk& c) {
  auto Q = x.q.middleRows(c.begin, c.len), K = x.k.middleRows(c.begin, c.len);  // (len, dk)
  Mat<Real> A = Mat<Real>::Zero(c.len, c.len);
  if constexpr (VectorGate) {
    for (int64_t t = 0; t < c.len; t++)
      for (int64_t s = 0; s < t; s++)  // A[t,s] = sum_d q_t[d] k_s[d] exp(Gq_t[d] - G_s[d])
        A(t, s) = (Q.row(t).array() * K.row(s).array() *
                   (G.gq.row(c.begin + t) - G.gk.row(c.begin + s)).array().exp()).sum();
  } else {
    A = (Q * K.transpose()).cwiseProduct(scalar_decay_matrix(G, c));  // (Q K^T) (.) Gamma
  }
  for (int64_t t = 0; t < c.len; t++) A(t, t) = (Q.row(t).array() * K.row(t).array() * x.bonus.array()).sum();
  return A;
}

// Backward of the s < t scores: given dA, accumulate dQ, dK (len, dk) of chunk c.
template <class Real, bool VectorGate>
void chunk_scores_backward(Mat<Real>& dQ, Mat<Real>& dK, const Mat<Real>& dA, const Head<Real>& x,
                           const CumGates<Real>& G, const Chunk& c) {
  auto Q = x.q.middleRows(c.begin, c.len), K = x.k.middleRows(c.begin, c.len);  // (len, dk)
  if constexpr (VectorGate) {
    Row<Real> decay(K.cols());  // exp(Gq_t - G_s): (dk), sized once
    for (int64_t t = 0; t < c.len; t++)
      for (int64_t s = 0; s < t; s++) {
        decay = (G.gq.row(c.begin + t) - G.gk.row(c.begin + s)).array().exp();
        dQ.row(t) += dA(t, s) * K.row(s).cwiseProduct(decay);  // A[t,s] = sum_d q_t k_s decay
        dK.row(s) += dA(t, s) * Q.row(t).cwiseProduct(decay);
      }
  } else {
    Mat<Real> dA_gamma = dA.cwiseProduct(scalar_decay_matrix(G, c));  // A = (Q K^T) (.) Gamma
    dQ += dA_gamma * K;                                              //  => dQ = (dA (.) Gamma) K
    dK += dA_gamma.transpose() * Q;                                  //     dK = (dA (.) Gamma)^T Q
  }
}

// Pass 2 of both directions (4.8): the inter-chunk recurrence, sequential over chunks.
// Returns h[n] = the state at the start of chunk n for n = 0..NT-1 (zero where a document starts
// the chunk), and h[NT] = the final state.
template <class Real>
std::vector<Mat<Real>> chunk_start_states(const Head<Real>& x, const CumGates<Real>& G,
                                          const std::vector<Chunk>& chunks) {
  std::vector<Mat<Real>> h{x.s0};
  for (size_t n = 0; n < chunks.size(); n++) {
    const Chunk& c = chunks[n];
    if (x.resets_chunk(n)) h.back().setZero();
    Row<Real> decay_all = G.gk.row(c.last()).array().exp();                     // exp(G_last): (dk)
    Mat<Real> keys_at_end = x.k.middleRows(c.begin, c.len).cwiseProduct(decay_to_end(G, c));  // (len, dk)
    Mat<Real> next = decay_all.asDiagonal() * h.back()                           // Diag(exp(G_last)) h
                     + keys_at_end.transpose() * x.v.middleRows(c.begin, c.len);  // + sum_s (k_s e^{G_last-G_s}) v_s^T
    h.push_back(next);
  }
  return h;
}

// Chunked forward of one head: o (T, dv) and the final state (dk, dv).
template <class Real, bool VectorGate>
void forward(Mat<Real>& o, Mat<Real>& s_final, const Head<Real>& x, Real scale, int64_t chunk_size, ReadAt read) {
  // Pass 1: in-chunk cumulative gates.
  const std::vector<Chunk> chunks = split_chunks(x.q.rows(), chunk_size);
  const CumGates<Real> G = cumulative_gates(x.g, chunks, read);
  // Pass 2: the chunk-start states h[n] (the only sequential part).
  const std::vector<Mat<Real>> h = chunk_start_states(x, G, chunks);
  // Pass 3: every chunk's outputs from its start state (independent across chunks).
  o.resize(x.q.rows(), x.v.cols());
  for (size_t n = 0; n < chunks.size(); n++) {
    const Chunk& c = chunks[n];
    Mat<Real> A = chunk_scores<Real, VectorGate>(x, G, c);  // (len, len)
    o.middleRows(c.begin, c.len) = scale * (queries_from_start(x, G, c) * h[n]           // inter-chunk
                                            + A * x.v.middleRows(c.begin, c.len));      // intra-chunk
  }
  s_final = h.back();
}

// Chunked backward of one head (4.9 without the delta-rule terms, gate gradient by 4.10).
// d_o: (T, dv) gradient of o; ds_final: (dk, dv) gradient of the final state.
template <class Real, bool VectorGate>
HeadGrads<Real> backward(const Head<Real>& x, const Mat<Real>& d_o, const Mat<Real>& ds_final, Real scale,
                         int64_t chunk_size, ReadAt read) {
  const int64_t T = x.q.rows(), dk = x.q.cols();
  // Pass 1: recompute the cumulative gates and the chunk-start states h[n].
  const std::vector<Chunk> chunks = split_chunks(T, chunk_size);
  const CumGates<Real> G = cumulative_gates(x.g, chunks, read);
  const std::vector<Mat<Real>> h = chunk_start_states(x, G, chunks);

  // Pass 2: reverse inter-chunk recurrence. dh[n] = gradient of the state at the END of chunk n.
  HeadGrads<Real> grads;
  std::vector<Mat<Real>> dh(chunks.size());
  Mat<Real> dS = ds_final;  // (dk, dv)
  for (size_t n = chunks.size(); n-- > 0;) {
    const Chunk& c = chunks[n];
    dh[n] = dS;
    Row<Real> decay_all = G.gk.row(c.last()).array().exp();
    // S_end = Diag(exp(G_last)) h + ...  and  o = scale * Qg h + ...   =>
    //   dh_start = Diag(exp(G_last)) dS_end + scale * Qg^T dO
    const Mat<Real> Qg = queries_from_start(x, G, c);  // (len, dk)
    dS = decay_all.asDiagonal() * dS + scale * Qg.transpose() * d_o.middleRows(c.begin, c.len);
    if (x.resets_chunk(n)) dS.setZero();  // the state entering the chunk was replaced by zero
  }
  grads.ds0 = dS;

  // Pass 3: per chunk (independent given h[n], dh[n]).
  grads.dq.resize(T, dk);
  grads.dk.resize(T, dk);
  grads.dv.resize(T, x.v.cols());
  grads.dg.resize(T, dk);
  grads.dbonus = Row<Real>::Zero(dk);
  for (size_t n = 0; n < chunks.size(); n++) {
    const Chunk& c = chunks[n];
    auto Q = x.q.middleRows(c.begin, c.len), K = x.k.middleRows(c.begin, c.len);  // (len, dk)
    auto V = x.v.middleRows(c.begin, c.len), dO = d_o.middleRows(c.begin, c.len);  // (len, dv)
    const Mat<Real> A = chunk_scores<Real, VectorGate>(x, G, c);                  // (len, len)
    const Mat<Real> to_end = decay_to_end(G, c);                                   // (len, dk)

    // 3a. o = scale * A V                =>  dA = scale * dO V^T (lower triangle), dV = scale * A^T dO
    //     S_end = ... + (K (.) to_end)^T V  =>  dV += (K (.) to_end) dh
    Mat<Real> dA = Mat<Real>((scale * dO * V.transpose()).template triangularView<Eigen::Lower>());
    grads.dv.middleRows(c.begin, c.len) = scale * A.transpose() * dO + K.cwiseProduct(to_end) * dh[n];

    // 3b. The gated paths of q and k (everything but the diagonal of A):
    //     o = scale * (Q (.) exp(Gq)) h      =>  dQ = scale * (dO h^T) (.) exp(Gq)
    //     S_end = ... + (K (.) to_end)^T V   =>  dK_state = (V dh^T) (.) to_end
    //     A[t,s], s < t                      =>  chunk_scores_backward
    Mat<Real> dQ = (scale * dO * h[n].transpose()).cwiseProduct(decay_from_start(G, c));
    const Mat<Real> dK_state = (V * dh[n].transpose()).cwiseProduct(to_end);
    Mat<Real> dK = dK_state;
    chunk_scores_backward<Real, VectorGate>(dQ, dK, dA, x, G, c);

    // 3c. Gate (4.10): q meets its gate only as q * exp(Gq) and k only as k * exp(-G), so
    //     dGq = q (.) dQ, dG = -k (.) dK; the state update adds, at the chunk's last token,
    //     exp(G_last) (.) rowsum(h (.) dh) + sum_s k_s (.) dK_state_s.
    Mat<Real> dGq = Q.cwiseProduct(dQ);   // (len, dk)
    Mat<Real> dGk = -K.cwiseProduct(dK);  // (len, dk)
    const Row<Real> h_dh = h[n].cwiseProduct(dh[n]).rowwise().sum().transpose();  // rowsum(h (.) dh): (dk)
    dGk.row(c.len - 1) += G.gk.row(c.last()).array().exp().matrix().cwiseProduct(h_dh) +
                          K.cwiseProduct(dK_state).colwise().sum();
    // g_j enters G_t for t >= j, and Gq_t for t >= j (after_update) or t > j (before_update):
    //     dg_j = sum_{t >= j} dG_t + sum_{t >= j or > j} dGq_t   (reverse cumsum inside the chunk)
    Row<Real> from_later = Row<Real>::Zero(dk);
    for (int64_t j = c.len - 1; j >= 0; j--) {
      Row<Real> own = dGk.row(j);
      if (read == ReadAt::after_update) own += dGq.row(j);
      grads.dg.row(c.begin + j) = from_later + own;
      from_later += dGk.row(j) + dGq.row(j);
    }

    // 3d. The diagonal A[t,t] = sum_d q_t[d] k_t[d] bonus[d] (no gate).
    for (int64_t t = 0; t < c.len; t++) {
      dQ.row(t) += dA(t, t) * K.row(t).cwiseProduct(x.bonus);
      dK.row(t) += dA(t, t) * Q.row(t).cwiseProduct(x.bonus);
      grads.dbonus += dA(t, t) * Q.row(t).cwiseProduct(K.row(t));
    }
    grads.dq.middleRows(c.begin, c.len) = dQ;
    grads.dk.middleRows(c.begin, c.len) = dK;
  }
  return grads;
}

// Random log gates for gradchecks and tests, drawn as fla's tests do (mixers.md 16):
// logsigmoid(N(0, 1)) / normalizer, F64. Mostly in [-3, 0); a larger normalizer decays less.
inline Tensor random_log_gate(const Shape& shape, uint64_t seed, double normalizer) {
  Tensor g = Tensor::randn(shape, seed, 1.0, DType::F64);
  double* p = g.data<double>();
  for (int64_t i = 0; i < g.numel(); i++) p[i] = -std::log1p(std::exp(-p[i])) / normalizer;
  return g;
}

}  // namespace decay_chunk
}  // namespace hla
