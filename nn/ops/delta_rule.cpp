// The general delta rule on the CPU (mixers.md 4.5-4.9): token recurrence and chunked WY form,
// forward and analytic backward, templated on float/double.
//
// Layout: every (batch, value head) pair is an independent sequence. Its inputs are first
// gathered into per-head matrices whose rows are tokens, with every coefficient WIDENED to
// channels: a scalar gate or beta is repeated on every channel, an absent gate is 0. So one code
// path serves all four mixers (a scalar gate is a vector gate with equal channels), and the
// variants only matter where a head is loaded and where its gradients are stored (a scalar's
// gradient is the sum over its channels; q/k gradients are summed over the value heads that
// share a query/key head).
//
// Rows are tokens, so a key or query is a ROW vector here and S^T x of the spec is written x S.
#include "nn/ops/delta_rule.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "nn/ops/attention.h"
#include "nn/ops/document_chunks.h"
#include "nn/ops/parallel.h"
#include "nn/ops/solve_tril.h"
#include "nn/ops/check.h"
#include "nn/ops/kept_states.h"
#include "tensor/dispatch.h"
#include "tensor/math.h"
#ifdef HLA_CUDA
#include "cuda/delta_rule.h"
#endif

namespace hla {
namespace cpu {
namespace {

using Eigen::Index;
template <class T> using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T> using RowVec = Eigen::Matrix<T, 1, Eigen::Dynamic>;

// ---------------------------------------------------------------------------------------------
// One (batch, value head) sequence.

template <class T>
struct HeadInputs {
  Mat<T> q, k;  // (T, dk)  of query/key head j / (HV / H)
  Mat<T> v;     // (T, dv)
  Mat<T> g;     // (T, dk)  log decay per key channel (scalar gate repeated; no gate: 0)
  Mat<T> b;     // (T, dk)  erase gate (scalar beta repeated)
  Mat<T> w;     // (T, dv)  write gate (scalar beta repeated)
  Mat<T> h0;    // (dk, dv) initial state
  const int32_t* doc_start = nullptr;    // (T) this row's first token of each token's document, or null
  const int32_t* chunk_reset = nullptr;  // (T / C) this row's chunks that start a document, or null

  // Whether the state is zeroed before token t: a document starts there (t = 0 starts from h0).
  bool starts_document(Index t) const { return doc_start && t > 0 && doc_start[t] == t; }
  // Whether the state entering chunk n is zeroed (chunked form on the document layout).
  bool resets_chunk(size_t n) const { return chunk_reset && chunk_reset[n]; }
};

template <class T>
struct HeadOutputs {
  Mat<T> o;  // (T, dv)
  Mat<T> u;  // (T, dv)  the residual u_t
  Mat<T> S;  // (dk, dv) final state
};

// Gradients of HeadInputs, same names and shapes.
template <class T>
struct HeadGrads {
  Mat<T> q, k, v, g, b, w, h0;
};

template <class T>
struct InputPointers {
  const T *q, *k, *v, *g, *b, *w, *h0;
};

// Rows t = 0..T-1 of head `head` of a (B, T, heads, width) tensor, as a (T, width) matrix.
template <class T>
Mat<T> load_rows(const T* p, const DeltaRuleDims& d, int64_t bi, int64_t head, int64_t heads,
                 int64_t width) {
  using Strided = Eigen::Map<const Mat<T>, 0, Eigen::OuterStride<>>;
  return Strided(p + (bi * d.T * heads + head) * width, d.T, width, Eigen::OuterStride<>(heads * width));
}

// The same rows of a (B, T, heads, width) tensor += X.
template <class T>
void add_rows(T* p, const Mat<T>& X, const DeltaRuleDims& d, int64_t bi, int64_t head,
              int64_t heads, int64_t width) {
  using Strided = Eigen::Map<Mat<T>, 0, Eigen::OuterStride<>>;
  Strided(p + (bi * d.T * heads + head) * width, d.T, width, Eigen::OuterStride<>(heads * width)) += X;
}

// A per-(token, value head) coefficient as a (T, width) matrix: a vector one (B, T, HV, width)
// as is, a scalar one (B, T, HV) repeated on every channel, an absent one (null) as `fill`.
template <class T>
Mat<T> load_coef(const T* p, bool is_vector, T fill, const DeltaRuleDims& d, int64_t bi,
                 int64_t j, int64_t width) {
  if (!p) return Mat<T>::Constant(d.T, width, fill);
  if (is_vector) return load_rows(p, d, bi, j, d.HV, width);
  return load_rows(p, d, bi, j, d.HV, 1).replicate(1, width);
}

// The gradient of a widened coefficient, added back in its own shape (a scalar's gradient is
// the sum over the channels it was repeated on). Null: not wanted.
template <class T>
void add_coef_grad(T* p, const Mat<T>& dX, bool is_vector, const DeltaRuleDims& d, int64_t bi,
                   int64_t j, int64_t width) {
  if (!p) return;
  if (is_vector) add_rows(p, dX, d, bi, j, d.HV, width);
  else add_rows<T>(p, dX.rowwise().sum(), d, bi, j, d.HV, 1);
}

// The elements of a per-(token, value head) coefficient: (B, T, HV) scalar or (B, T, HV, width).
inline int64_t coef_numel(bool is_vector, const DeltaRuleDims& d, int64_t width) {
  return d.B * d.T * d.HV * (is_vector ? width : 1);
}

// Zeroes a gradient buffer the backward adds into (null: not wanted).
template <class T>
void zero_grad(T* p, int64_t n) {
  if (p) std::fill(p, p + n, T(0));
}

template <class T>
HeadInputs<T> load_head(const InputPointers<T>& in, const DeltaRuleDims& d, int64_t bi, int64_t j) {
  const int64_t h = j / (d.HV / d.H);  // the query/key head this value head reads
  HeadInputs<T> x;
  x.q = load_rows(in.q, d, bi, h, d.H, d.dk);
  x.k = load_rows(in.k, d, bi, h, d.H, d.dk);
  x.v = load_rows(in.v, d, bi, j, d.HV, d.dv);
  x.g = load_coef(in.g, d.gate == DeltaGate::Vector, T(0), d, bi, j, d.dk);
  x.b = load_coef(in.b, d.erase_vector, T(0), d, bi, j, d.dk);
  x.w = load_coef(in.w, d.write_vector, T(0), d, bi, j, d.dv);
  const int64_t state = d.dk * d.dv;
  x.doc_start = d.doc_start ? d.doc_start + bi * d.T : nullptr;
  x.chunk_reset = d.chunk_reset ? d.chunk_reset + bi * (d.T / d.chunk_size) : nullptr;
  x.h0 = in.h0 ? Mat<T>(Eigen::Map<const Mat<T>>(in.h0 + (bi * d.HV + j) * state, d.dk, d.dv))
               : Mat<T>(Mat<T>::Zero(d.dk, d.dv));
  return x;
}

// ---------------------------------------------------------------------------------------------
// The token recurrence (4.5) and its reverse-time backward (13, "delta-family token-level
// reference").

// One step from S_{t-1}, with the pieces the backward reuses. Sized once per head and
// overwritten at every token: the token loops allocate nothing.
template <class T>
struct DeltaStep {
  RowVec<T> decay;    // (dk) exp(g_t)
  RowVec<T> e;        // (dk) erase key b_t * k_t
  RowVec<T> y;        // (dv) written value w_t * v_t
  RowVec<T> u;        // (dv) new value y_t - S'_t^T e_t
  Mat<T> S_decayed;   // (dk, dv) S'_t
  Mat<T> S;           // (dk, dv) S_t
  DeltaStep(Index dk, Index dv) : decay(dk), e(dk), y(dv), u(dv), S_decayed(dk, dv), S(dk, dv) {}
};

// S_prev: (dk, dv), never s.S itself.
template <class T>
void delta_step(const HeadInputs<T>& in, Index t, const Eigen::Ref<const Mat<T>>& S_prev, DeltaStep<T>& s) {
  s.decay = in.g.row(t).array().exp().matrix();
  s.S_decayed = s.decay.asDiagonal() * S_prev;               // S'_t = Diag(exp(g_t)) S_{t-1}
  s.e = in.b.row(t).cwiseProduct(in.k.row(t));               // e_t = b_t * k_t
  s.y = in.w.row(t).cwiseProduct(in.v.row(t));               // y_t = w_t * v_t
  s.u = s.y;
  s.u.noalias() -= s.e * s.S_decayed;                        // u_t = y_t - S'_t^T e_t
  s.S = s.S_decayed;
  s.S.noalias() += in.k.row(t).transpose() * s.u;            // S_t = S'_t + k_t u_t^T
}

template <class T>
HeadOutputs<T> recurrent_forward(const HeadInputs<T>& in, T scale) {
  const Index n = in.q.rows();
  HeadOutputs<T> out{Mat<T>(n, in.v.cols()), Mat<T>(n, in.v.cols()), in.h0};
  DeltaStep<T> s(in.k.cols(), in.v.cols());
  for (Index t = 0; t < n; t++) {
    if (in.starts_document(t)) out.S.setZero();             // a document starts from S = 0
    delta_step<T>(in, t, out.S, s);
    out.S = s.S;
    out.u.row(t) = s.u;
    out.o.row(t).noalias() = scale * in.q.row(t) * s.S;      // o_t = scale S_t^T q_t
  }
  return out;
}

// dO, dU: (T, dv) gradients of o and u;  dS_final: (dk, dv) gradient of S_T.
template <class T>
HeadGrads<T> recurrent_backward(const HeadInputs<T>& in, T scale, const Mat<T>& dO,
                                const Mat<T>& dU, const Mat<T>& dS_final) {
  const Index n = in.q.rows(), kdim = in.k.cols(), vdim = in.v.cols();
  // Replay the forward keeping every S_{t-1}: S_prev rows t*dk .. t*dk + dk-1 hold S_{t-1}.
  Mat<T> S_prev(n * kdim, vdim);  // (T * dk, dv) for this one head
  DeltaStep<T> s(kdim, vdim);
  Mat<T> S = in.h0;               // (dk, dv)
  for (Index t = 0; t < n; t++) {
    if (in.starts_document(t)) S.setZero();
    S_prev.middleRows(t * kdim, kdim) = S;
    delta_step<T>(in, t, S, s);
    S = s.S;
  }
  HeadGrads<T> gr{Mat<T>(n, in.q.cols()), Mat<T>(n, in.k.cols()), Mat<T>(n, in.v.cols()),
                  Mat<T>(n, in.g.cols()), Mat<T>(n, in.b.cols()), Mat<T>(n, in.w.cols()), Mat<T>()};
  Mat<T> dS = dS_final;             // (dk, dv) dL/dS_t, walking t down
  Mat<T> dS_decayed(kdim, vdim);    // (dk, dv) dL/dS'_t
  RowVec<T> du(vdim), dk(kdim), dr(vdim), de(kdim);
  for (Index t = n - 1; t >= 0; t--) {
    delta_step<T>(in, t, S_prev.middleRows(t * kdim, kdim), s);
    // o_t = scale S_t^T q_t
    dS.noalias() += scale * in.q.row(t).transpose() * dO.row(t);  // dS_t += scale q_t do_t^T
    gr.q.row(t).noalias() = scale * dO.row(t) * s.S.transpose();   // dq_t = scale S_t do_t
    // S_t = S'_t + k_t u_t^T   (u_t is also an output)
    du = dU.row(t);
    du.noalias() += in.k.row(t) * dS;                       // du_t = dS^T k_t (+ residual grad)
    dk.noalias() = s.u * dS.transpose();                    // dk_t = dS u_t
    // u_t = y_t - r_t,  r_t = S'_t^T e_t
    const RowVec<T>& dy = du;
    dr = -du;
    dS_decayed = dS;
    dS_decayed.noalias() += s.e.transpose() * dr;           // dS' = dS + e_t dr^T
    de.noalias() = dr * s.S_decayed.transpose();            // de_t = S'_t dr
    // S'_t = Diag(exp(g_t)) S_{t-1}
    gr.g.row(t) = s.S_decayed.cwiseProduct(dS_decayed).rowwise().sum().transpose();  // rowsum(S' (.) dS')
    dS = s.decay.asDiagonal() * dS_decayed;                 // dS_{t-1} = Diag(exp(g_t)) dS'
    if (in.starts_document(t)) dS.setZero();                // S_{t-1} was replaced by 0: no gradient reaches it
    // e_t = b_t * k_t,  y_t = w_t * v_t
    gr.k.row(t) = dk + in.b.row(t).cwiseProduct(de);
    gr.b.row(t) = in.k.row(t).cwiseProduct(de);
    gr.v.row(t) = in.w.row(t).cwiseProduct(dy);
    gr.w.row(t) = in.v.row(t).cwiseProduct(dy);
  }
  gr.h0 = dS;
  return gr;
}

// ---------------------------------------------------------------------------------------------
// The chunked WY form (4.6-4.9). Chunks of C tokens (the last may be partial); inside a chunk,
// local tokens t = 0..n-1 and G = inclusive cumulative log gate restarted at the chunk start.

// Whether every row of G repeats its first channel exactly: a scalar gate (or none), widened.
template <class T>
bool repeats_one_channel(const Mat<T>& G) {
  return (G.colwise() - G.col(0)).isZero(0);
}

// M[t,s] = sum_d X[t,d] K[s,d] exp(G[t,d] - G[s,d]) for s < t (strict) or s <= t, else 0.
// The exponent is only formed for s <= t, where G[t] - G[s] <= 0 (4.1: mask before exp).
// X = E gives L of 4.6, X = Q gives Aqk. With a scalar gate (or none) the exp factor is the same
// on every channel and this is (X K^T) (.) exp(G_t - G_s), one matmul: taken when every row of G
// repeats its first channel exactly (a repeated scalar's cumulative sums are equal bit for bit).
template <class T>
Mat<T> decayed_scores(const Mat<T>& X, const Mat<T>& K, const Mat<T>& G, bool strict) {
  const Index n = X.rows();
  Mat<T> M = Mat<T>::Zero(n, n);
  const bool scalar_gate = repeats_one_channel(G);
  const Mat<T> XK = scalar_gate ? Mat<T>(X * K.transpose()) : Mat<T>();  // (n, n)
  for (Index t = 0; t < n; t++)
    for (Index s = 0; s < (strict ? t : t + 1); s++)
      M(t, s) = scalar_gate ? XK(t, s) * std::exp(G(t, 0) - G(s, 0))
                            : (X.row(t).array() * K.row(s).array() * (G.row(t) - G.row(s)).array().exp()).sum();
  return M;
}

// Backward of decayed_scores: given dM, adds to dX, dK and dG (the in-chunk cumulative gate):
// each pair term p = dM[t,s] X[t,d] K[s,d] exp(G[t,d] - G[s,d]) gives +p to dG[t,d], -p to dG[s,d].
// With a scalar gate (the forward's test) the pairs are three matmuls with the masked, decayed
// C[t,s] = dM[t,s] exp(G_t - G_s):  dX += C K,  dK += C^T X,  and the sums of p over s and over t
// are X (.) (C K) and K (.) (C^T X).
template <class T>
void decayed_scores_backward(const Mat<T>& dM, const Mat<T>& X, const Mat<T>& K, const Mat<T>& G,
                             bool strict, Mat<T>& dX, Mat<T>& dK, Mat<T>& dG) {
  const Index n = X.rows(), width = X.cols();
  if (repeats_one_channel(G)) {
    Mat<T> C = Mat<T>::Zero(n, n);  // (n, n)
    for (Index t = 0; t < n; t++)
      for (Index s = 0; s < (strict ? t : t + 1); s++) C(t, s) = dM(t, s) * std::exp(G(t, 0) - G(s, 0));
    const Mat<T> CK = C * K;               // (n, dk)
    const Mat<T> CtX = C.transpose() * X;  // (n, dk)
    dX += CK;
    dK += CtX;
    dG += X.cwiseProduct(CK) - K.cwiseProduct(CtX);
    return;
  }
  for (Index t = 0; t < n; t++)
    for (Index s = 0; s < (strict ? t : t + 1); s++)
      for (Index c = 0; c < width; c++) {
        const T decayed = dM(t, s) * std::exp(G(t, c) - G(s, c));
        dX(t, c) += decayed * K(s, c);
        dK(s, c) += decayed * X(t, c);
        const T pair = decayed * X(t, c) * K(s, c);
        dG(t, c) += pair;
        dG(s, c) -= pair;
      }
}

// Everything 4.6 builds inside one chunk from the chunk's own inputs (no state involved): the
// part of the CUDA kernel that runs in parallel over chunks.
template <class T>
struct ChunkWY {
  Index t0 = 0, n = 0;  // first token, number of tokens
  Mat<T> G;        // (n, dk) inclusive in-chunk cumsum of g
  Mat<T> E;        // (n, dk) erase keys e_t = b_t * k_t
  Mat<T> Y;        // (n, dv) written values y_t = w_t * v_t
  Mat<T> Ehat;     // (n, dk) e_t * exp(G_t)
  Mat<T> A;        // (n, n)  (I + L)^{-1}, L[t,s] = sum_d e_t k_s exp(G_t - G_s), s < t
  Mat<T> W;        // (n, dk) A Ehat
  Mat<T> U;        // (n, dv) A Y
  Mat<T> Aqk;      // (n, n)  sum_d q_t k_s exp(G_t - G_s), s <= t
  Mat<T> Qg;       // (n, dk) q_t * exp(G_t)
  Mat<T> Kdecay;   // (n, dk) exp(G_last - G_s): decay from token s to the chunk end
  Mat<T> Kg;       // (n, dk) k_s * exp(G_last - G_s)
  RowVec<T> decay_last;  // (dk) exp(G_last): decay over the whole chunk
};

template <class T>
ChunkWY<T> prepare_chunk(const HeadInputs<T>& in, Index t0, Index n) {
  ChunkWY<T> c;
  c.t0 = t0;
  c.n = n;
  auto Q = in.q.middleRows(t0, n);
  auto K = in.k.middleRows(t0, n);
  // 4.1: cumulative log gate restarted at the chunk start (G <= 0, non-increasing in t).
  c.G = in.g.middleRows(t0, n);
  for (Index t = 1; t < n; t++) c.G.row(t) += c.G.row(t - 1);
  Mat<T> expG = c.G.array().exp().matrix();
  c.E = in.b.middleRows(t0, n).cwiseProduct(K);
  c.Y = in.w.middleRows(t0, n).cwiseProduct(in.v.middleRows(t0, n));
  c.Ehat = c.E.cwiseProduct(expG);
  // 4.6 + 4.7: the UT transform.
  c.A = solve_tril(decayed_scores<T>(c.E, K, c.G, /*strict=*/true));
  c.W = c.A * c.Ehat;
  c.U = c.A * c.Y;
  c.Aqk = decayed_scores<T>(Q, K, c.G, /*strict=*/false);
  c.Qg = Q.cwiseProduct(expG);
  RowVec<T> G_last = c.G.row(n - 1);
  c.Kdecay = (G_last.replicate(n, 1) - c.G).array().exp().matrix();  // exponent <= 0
  c.Kg = K.cwiseProduct(c.Kdecay);
  c.decay_last = G_last.array().exp().matrix();
  return c;
}

template <class T>
std::vector<ChunkWY<T>> prepare_chunks(const HeadInputs<T>& in, Index chunk_size) {
  std::vector<ChunkWY<T>> chunks;
  for (Index t0 = 0; t0 < in.q.rows(); t0 += chunk_size)
    chunks.push_back(prepare_chunk(in, t0, std::min(chunk_size, in.q.rows() - t0)));
  return chunks;
}

// 4.8: the only sequential part, a scan over chunks carrying the state.
template <class T>
struct ChunkScan {
  std::vector<Mat<T>> h;     // h[n]: (dk, dv) state at the START of chunk n
  std::vector<Mat<T>> Vnew;  // Vnew[n]: (n_tokens, dv) rows u_t of the chunk
  Mat<T> S_final;            // (dk, dv)
};

// resets: the head's inputs, whose chunks flagged in chunk_reset start from S = 0.
template <class T>
ChunkScan<T> scan_chunks(const std::vector<ChunkWY<T>>& chunks, const HeadInputs<T>& resets) {
  ChunkScan<T> scan;
  Mat<T> S = resets.h0;
  for (const ChunkWY<T>& c : chunks) {
    if (resets.resets_chunk(scan.h.size())) S.setZero();  // a document starts from S = 0
    scan.h.push_back(S);
    scan.Vnew.push_back(c.U - c.W * S);                             // Vnew = U - W S0
    S = c.decay_last.asDiagonal() * S + c.Kg.transpose() * scan.Vnew.back();  // S_end
  }
  scan.S_final = S;
  return scan;
}

template <class T>
HeadOutputs<T> chunk_forward(const HeadInputs<T>& in, T scale, Index chunk_size) {
  const Index n = in.q.rows(), dv = in.v.cols();
  // Pass 1 (parallel over chunks): G, the UT transform A, W, U, Aqk.
  std::vector<ChunkWY<T>> chunks = prepare_chunks(in, chunk_size);
  // Pass 2 (sequential): chunk start states h[n] and new values Vnew.
  ChunkScan<T> scan = scan_chunks(chunks, in);
  // Pass 3 (parallel over chunks): o = scale (Qg h[n] + Aqk Vnew).
  HeadOutputs<T> out{Mat<T>(n, dv), Mat<T>(n, dv), scan.S_final};
  for (size_t i = 0; i < chunks.size(); i++) {
    const ChunkWY<T>& c = chunks[i];
    out.o.middleRows(c.t0, c.n) = scale * (c.Qg * scan.h[i] + c.Aqk * scan.Vnew[i]);
    out.u.middleRows(c.t0, c.n) = scan.Vnew[i];
  }
  return out;
}

// 4.9 steps 4-8 for one chunk: given its start state h, the gradient dh of its END state and
// the total gradient dVnew of its new values, the gradients of its tokens' inputs.
template <class T>
void chunk_backward_local(const HeadInputs<T>& in, const ChunkWY<T>& c, const Mat<T>& h,
                          const Mat<T>& Vnew, const Mat<T>& dh, const Mat<T>& dVnew,
                          const Mat<T>& dO, T scale, HeadGrads<T>& gr) {
  const Index n = c.n, last = n - 1, dk = in.k.cols();
  auto Q = in.q.middleRows(c.t0, n);
  auto K = in.k.middleRows(c.t0, n);
  Mat<T> expG = c.G.array().exp().matrix();
  Mat<T> dQ = Mat<T>::Zero(n, dk), dK = Mat<T>::Zero(n, dk), dE = Mat<T>::Zero(n, dk);
  Mat<T> dG = Mat<T>::Zero(n, dk);  // gradient of the cumulative gate G
  // (a) o = scale (Qg h + Aqk Vnew),  Qg = Q * exp(G)
  Mat<T> dQg = scale * dO * h.transpose();                          // (n, dk)
  dQ += dQg.cwiseProduct(expG);
  dG += dQg.cwiseProduct(c.Qg);
  Mat<T> dAqk = scale * dO * Vnew.transpose();                      // masked to s <= t below
  decayed_scores_backward<T>(dAqk, Q, K, c.G, /*strict=*/false, dQ, dK, dG);
  // (b) S_end = Diag(exp(G_last)) h + Kg^T Vnew,  Kg = K * exp(G_last - G)
  dG.row(last) += c.decay_last.cwiseProduct(h.cwiseProduct(dh).rowwise().sum().transpose());
  Mat<T> dKg = Vnew * dh.transpose();                               // (n, dk)
  dK += dKg.cwiseProduct(c.Kdecay);
  Mat<T> kg_pair = dKg.cwiseProduct(c.Kg);                          // d/dG of exp(G_last - G_s)
  dG.row(last) += kg_pair.colwise().sum();
  dG -= kg_pair;
  // (c) Vnew = U - W h
  const Mat<T>& dU = dVnew;
  Mat<T> dW = -dVnew * h.transpose();                               // (n, dk)
  // (d) U = A Y,  W = A Ehat
  Mat<T> dA = dU * c.Y.transpose() + dW * c.Ehat.transpose();       // (n, n)
  Mat<T> dY = c.A.transpose() * dU;                                 // (n, dv)
  Mat<T> dEhat = c.A.transpose() * dW;                              // (n, dk)
  // (e) Ehat = E * exp(G)
  dE += dEhat.cwiseProduct(expG);
  dG += dEhat.cwiseProduct(c.Ehat);
  // (f) A = (I + L)^{-1}  =>  dL = -A^T dA A^T, strictly lower (L's other entries are constant 0)
  Mat<T> dL = -(c.A.transpose() * dA * c.A.transpose());
  decayed_scores_backward<T>(dL, c.E, K, c.G, /*strict=*/true, dE, dK, dG);
  // (g) E = b * K,  Y = w * V
  gr.k.middleRows(c.t0, n) = dK + in.b.middleRows(c.t0, n).cwiseProduct(dE);
  gr.b.middleRows(c.t0, n) = K.cwiseProduct(dE);
  gr.v.middleRows(c.t0, n) = in.w.middleRows(c.t0, n).cwiseProduct(dY);
  gr.w.middleRows(c.t0, n) = in.v.middleRows(c.t0, n).cwiseProduct(dY);
  gr.q.middleRows(c.t0, n) = dQ;
  // (h) G_t = g_0 + ... + g_t  =>  dg_t = sum_{s >= t} dG_s   (reverse cumsum inside the chunk)
  for (Index t = last - 1; t >= 0; t--) dG.row(t) += dG.row(t + 1);
  gr.g.middleRows(c.t0, n) = dG;
}

template <class T>
HeadGrads<T> chunk_backward(const HeadInputs<T>& in, T scale, Index chunk_size, const Mat<T>& dO,
                            const Mat<T>& dU, const Mat<T>& dS_final) {
  const Index n = in.q.rows();
  // Pass 1 + 2: recompute the chunk pieces, the start states h[n] and Vnew (4.9 step 1).
  std::vector<ChunkWY<T>> chunks = prepare_chunks(in, chunk_size);
  ChunkScan<T> scan = scan_chunks(chunks, in);
  // Pass 3 (sequential, reverse): dh[n] = gradient of chunk n's END state, and the total
  // gradient of each chunk's new values (4.9 step 3).
  std::vector<Mat<T>> dh(chunks.size()), dVnew(chunks.size());
  Mat<T> dS = dS_final;
  for (Index i = static_cast<Index>(chunks.size()) - 1; i >= 0; i--) {
    const ChunkWY<T>& c = chunks[i];
    auto dO_c = dO.middleRows(c.t0, c.n);
    dh[i] = dS;
    // Vnew feeds o (through Aqk), S_end (through Kg), and the residual output.
    dVnew[i] = scale * c.Aqk.transpose() * dO_c + c.Kg * dS + dU.middleRows(c.t0, c.n);
    // h[n] feeds S_end (decay), o (through Qg) and Vnew (through W).
    dS = c.decay_last.asDiagonal() * dS + scale * c.Qg.transpose() * dO_c
         - c.W.transpose() * dVnew[i];
    if (in.resets_chunk(i)) dS.setZero();  // h[n] was replaced by 0: the chunk before gets no gradient
  }
  HeadGrads<T> gr{Mat<T>(n, in.q.cols()), Mat<T>(n, in.k.cols()), Mat<T>(n, in.v.cols()),
                  Mat<T>(n, in.g.cols()), Mat<T>(n, in.b.cols()), Mat<T>(n, in.w.cols()), dS};
  // Pass 4 (parallel over chunks): every input's gradient inside each chunk.
  for (size_t i = 0; i < chunks.size(); i++)
    chunk_backward_local(in, chunks[i], scan.h[i], scan.Vnew[i], dh[i], dVnew[i],
                         Mat<T>(dO.middleRows(chunks[i].t0, chunks[i].n)), scale, gr);
  return gr;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Entry points: loop over (batch, value head), in parallel (nn/ops/parallel.h).

template <class T>
void delta_rule_forward(T* o, T* final_state, T* residual, const T* q, const T* k, const T* v,
                        const T* g, const T* b, const T* w, const T* h0, const DeltaRuleDims& d) {
  const InputPointers<T> in{q, k, v, g, b, w, h0};
  const T scale = static_cast<T>(d.scale);
  parallel_for(d.B * d.HV, [&](int64_t i) {  // (batch, value head) i = bi * HV + j writes its own rows
    const int64_t bi = i / d.HV, j = i % d.HV;
    HeadInputs<T> x = load_head(in, d, bi, j);
    HeadOutputs<T> out = d.chunk_size > 0 ? chunk_forward(x, scale, d.chunk_size)
                                          : recurrent_forward(x, scale);
    Eigen::Map<Mat<T>>(final_state + (bi * d.HV + j) * d.dk * d.dv, d.dk, d.dv) = out.S;
    using Strided = Eigen::Map<Mat<T>, 0, Eigen::OuterStride<>>;
    const int64_t row0 = (bi * d.T * d.HV + j) * d.dv;
    Strided(o + row0, d.T, d.dv, Eigen::OuterStride<>(d.HV * d.dv)) = out.o;
    Strided(residual + row0, d.T, d.dv, Eigen::OuterStride<>(d.HV * d.dv)) = out.u;
  });
}

template <class T>
void delta_rule_backward(T* grad_q, T* grad_k, T* grad_v, T* grad_g, T* grad_b, T* grad_w,
                         T* grad_h0, const T* d_o, const T* d_final_state, const T* d_residual,
                         const T* q, const T* k, const T* v, const T* g, const T* b, const T* w,
                         const T* h0, const DeltaRuleDims& d) {
  const InputPointers<T> in{q, k, v, g, b, w, h0};
  const T scale = static_cast<T>(d.scale);
  const int64_t state = d.dk * d.dv;
  // Every gradient is written: zero the buffers the per-head loop adds into (q and k sum over
  // the value heads of a group, scalar coefficients over their channels).
  zero_grad(grad_q, d.B * d.T * d.H * d.dk);
  zero_grad(grad_k, d.B * d.T * d.H * d.dk);
  zero_grad(grad_v, d.B * d.T * d.HV * d.dv);
  if (d.gate != DeltaGate::None) zero_grad(grad_g, coef_numel(d.gate == DeltaGate::Vector, d, d.dk));
  zero_grad(grad_b, coef_numel(d.erase_vector, d, d.dk));
  zero_grad(grad_w, coef_numel(d.write_vector, d, d.dv));
  // One task per (batch, query/key head): its value heads add into the same q and k rows, so
  // they run in one task, in order.
  const int64_t group = d.HV / d.H;
  parallel_for(d.B * d.H, [&](int64_t i) {
    const int64_t bi = i / d.H, h = i % d.H;
    for (int64_t j = h * group; j < (h + 1) * group; j++) {
      HeadInputs<T> x = load_head(in, d, bi, j);
      Mat<T> dO = load_rows(d_o, d, bi, j, d.HV, d.dv);                      // (T, dv)
      Mat<T> dU = load_rows(d_residual, d, bi, j, d.HV, d.dv);               // (T, dv)
      Mat<T> dS = d_final_state                                              // (dk, dv)
                      ? Mat<T>(Eigen::Map<const Mat<T>>(d_final_state + (bi * d.HV + j) * state, d.dk, d.dv))
                      : Mat<T>(Mat<T>::Zero(d.dk, d.dv));
      HeadGrads<T> gr = d.chunk_size > 0 ? chunk_backward(x, scale, d.chunk_size, dO, dU, dS)
                                         : recurrent_backward(x, scale, dO, dU, dS);
      add_rows(grad_q, gr.q, d, bi, h, d.H, d.dk);  // summed over the value heads of qk head h
      add_rows(grad_k, gr.k, d, bi, h, d.H, d.dk);
      add_rows(grad_v, gr.v, d, bi, j, d.HV, d.dv);
      if (d.gate != DeltaGate::None) add_coef_grad(grad_g, gr.g, d.gate == DeltaGate::Vector, d, bi, j, d.dk);
      add_coef_grad(grad_b, gr.b, d.erase_vector, d, bi, j, d.dk);
      add_coef_grad(grad_w, gr.w, d.write_vector, d, bi, j, d.dv);
      if (grad_h0) Eigen::Map<Mat<T>>(grad_h0 + (bi * d.HV + j) * state, d.dk, d.dv) = gr.h0;
    }
  });
}

template void delta_rule_forward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, const float*,
                                        const float*, const DeltaRuleDims&);
template void delta_rule_forward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*,
                                         const double*, const double*, const DeltaRuleDims&);
template void delta_rule_backward<float>(float*, float*, float*, float*, float*, float*, float*,
                                         const float*, const float*, const float*, const float*,
                                         const float*, const float*, const float*, const float*,
                                         const float*, const float*, const DeltaRuleDims&);
template void delta_rule_backward<double>(double*, double*, double*, double*, double*, double*,
                                          double*, const double*, const double*, const double*,
                                          const double*, const double*, const double*,
                                          const double*, const double*, const double*,
                                          const double*, const DeltaRuleDims&);

}  // namespace cpu

// ---------------------------------------------------------------------------------------------
// The Var function.

namespace {

// A per-(token, value head) coefficient: (B, T, HV) scalar or (B, T, HV, width) vector.
bool coef_is_vector(const Var& x, const char* name, int64_t B, int64_t T, int64_t HV, int64_t width) {
  const Shape& s = x.shape();
  if (s == Shape{B, T, HV}) return false;
  if (s == Shape{B, T, HV, width}) return true;
  fail("delta_rule: ", name, " must be (B, T, HV) = ", shape_str({B, T, HV}), " or (B, T, HV, ",
       width, ") = ", shape_str({B, T, HV, width}), ", got ", shape_str(s));
}

DeltaRuleDims check_inputs(const Var& q, const Var& k, const Var& v, const Var& g, const Var& b, const Var& w,
                           const Var& h0, const DeltaRuleOptions& opt) {
  HLA_CHECK(q.defined() && k.defined() && v.defined() && b.defined(),
            "delta_rule: q, k, v and b (beta) are required");
  HLA_CHECK(q.dim() == 4, "delta_rule: q must be (B, T, H, dk), got ", q.value().str());
  check_shape(k.value(), q.shape(), "delta_rule", "k");
  DeltaRuleDims d{};
  d.B = q.size(0), d.T = q.size(1), d.H = q.size(2), d.dk = q.size(3);
  HLA_CHECK(v.dim() == 4 && v.size(0) == d.B && v.size(1) == d.T,
            "delta_rule: v must be (B, T, HV, dv) with B, T of q ", q.value().str(), ", got ",
            v.value().str());
  d.HV = v.size(2), d.dv = v.size(3);
  HLA_CHECK(d.HV % d.H == 0, "delta_rule: value heads HV = ", d.HV,
            " must be a multiple of query/key heads H = ", d.H);
  d.gate = !g.defined() ? DeltaGate::None
           : coef_is_vector(g, "g", d.B, d.T, d.HV, d.dk) ? DeltaGate::Vector
                                                          : DeltaGate::Scalar;
  d.erase_vector = coef_is_vector(b, "b", d.B, d.T, d.HV, d.dk);
  if (w.defined()) {
    d.write_vector = coef_is_vector(w, "w", d.B, d.T, d.HV, d.dv);
  } else {
    HLA_CHECK(!d.erase_vector, "delta_rule: w = b (w undefined) needs a scalar beta (B, T, HV), got b ",
              b.value().str());
    d.write_vector = false;
  }
  if (h0.defined()) check_shape(h0.value(), {d.B, d.HV, d.dk, d.dv}, "delta_rule", "initial_state");
  const std::pair<const Var*, const char*> others[] = {{&k, "k"}, {&v, "v"}, {&g, "g"}, {&b, "b"},
                                                       {&w, "w"}, {&h0, "initial_state"}};
  for (const auto& [x, name] : others)
    if (x->defined()) check_operand(x->value(), q.value(), "delta_rule", name);
  HLA_CHECK(opt.chunk_size >= 0, "delta_rule: chunk_size must be >= 0, got ", opt.chunk_size);
  d.scale = opt.scale != 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(d.dk));
  d.chunk_size = opt.chunk_size;
  d.state_dtype = accum_dtype(q.value());
  return d;
}

// The device's kernels: cuda::delta_rule_* for GPU tensors, cpu::delta_rule_* otherwise. States
// in d.state_dtype. residual: the forward's u, which the GPU's chunked backward reads (its Vnew);
// u_f32: the GPU forward's fp32 copy of u where the GPU's recurrent backward reads it (undefined
// on the CPU, whose backward replays the forward, where the chunked kernels run, and when no
// backward follows); kept: what the GPU forward keeps for its backward
// (DeltaRuleOptions::keep_states), or undefined.
void delta_rule_forward(Tensor& o, Tensor& final_state, Tensor& residual, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& g, const Tensor& b, const Tensor& w, const Tensor& h0,
                        const DeltaRuleDims& d, Tensor& u_f32, Tensor& kept) {
  if (q.is_cuda()) {
    HLA_CUDA_ONLY(cuda::delta_rule_forward(o.raw(), final_state.data<float>(), residual.raw(), q.raw(), k.raw(),
                                           v.raw(), raw_or_null(g), b.raw(), w.raw(), data_or_null<float>(h0), d,
                                           data_or_null<float>(u_f32), data_or_null<float>(kept), q.dtype()));
    return;
  }
  dispatch_float(q.dtype(), "delta_rule", [&](auto tag) {
    using T = decltype(tag);
    cpu::delta_rule_forward(o.data<T>(), final_state.data<T>(), residual.data<T>(), q.data<T>(), k.data<T>(),
                            v.data<T>(), data_or_null<T>(g), b.data<T>(), w.data<T>(), data_or_null<T>(h0), d);
  });
}

void delta_rule_backward(Tensor& grad_q, Tensor& grad_k, Tensor& grad_v, Tensor& grad_g, Tensor& grad_b,
                         Tensor& grad_w, Tensor& grad_h0, const Tensor& d_o, const Tensor& d_final_state,
                         const Tensor& d_residual, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                         const Tensor& b, const Tensor& w, const Tensor& h0, const DeltaRuleDims& d,
                         const Tensor& residual, const Tensor& u_f32, Tensor& kept) {
  if (q.is_cuda()) {
    HLA_CUDA_ONLY(cuda::delta_rule_backward(grad_q.raw(), grad_k.raw(), grad_v.raw(), raw_or_null(grad_g), grad_b.raw(),
                                            grad_w.raw(), data_or_null<float>(grad_h0), d_o.raw(),
                                            d_final_state.data<float>(), d_residual.raw(), q.raw(), k.raw(), v.raw(),
                                            raw_or_null(g), b.raw(), w.raw(), data_or_null<float>(h0), d,
                                            residual.raw(), data_or_null<float>(u_f32), data_or_null<float>(kept),
                                            q.dtype()));
    return;
  }
  dispatch_float(q.dtype(), "delta_rule", [&](auto tag) {
    using T = decltype(tag);
    cpu::delta_rule_backward(grad_q.data<T>(), grad_k.data<T>(), grad_v.data<T>(), data_or_null<T>(grad_g),
                             grad_b.data<T>(), grad_w.data<T>(), data_or_null<T>(grad_h0), d_o.data<T>(),
                             d_final_state.data<T>(), d_residual.data<T>(), q.data<T>(), k.data<T>(), v.data<T>(),
                             data_or_null<T>(g), b.data<T>(), w.data<T>(), data_or_null<T>(h0), d);
  });
}

// The op on rows as they are, d from check_inputs with the documents' pointers (run_on_documents:
// d.doc_start for the token recurrence, d.chunk_reset for the chunked form on the document
// layout) into `keep`, which the backward keeps alive.
DeltaRuleOutputs delta_rule_rows(const Var& q, const Var& k, const Var& v, const Var& g, const Var& b, const Var& w,
                                 const Var& initial_state, const DeltaRuleDims& d, bool keep_states,
                                 const Tensor& keep) {
  const bool tied = !w.defined();  // w = b: the kernel reads beta twice, its gradient is the sum
  const DType dt = q.dtype();
  const Device dev = q.device();
  Tensor qv = q.value(), kv = k.value(), vv = v.value(), bv = b.value();
  Tensor gv = g.defined() ? g.value() : Tensor();
  Tensor wv = tied ? bv : w.value();
  Tensor h0 = initial_state.defined() ? initial_state.value().to(d.state_dtype) : Tensor();
  Tensor o = Tensor::empty({d.B, d.T, d.HV, d.dv}, dt, dev);                     // o: (B, T, HV, dv)
  Tensor final_state = Tensor::empty({d.B, d.HV, d.dk, d.dv}, d.state_dtype, dev);  // S_T: (B, HV, dk, dv)
  Tensor residual = Tensor::empty({d.B, d.T, d.HV, d.dv}, dt, dev);              // u: (B, T, HV, dv)
  const bool gpu_backward = qv.is_cuda() && backward_follows({&q, &k, &v, &g, &b, &w, &initial_state});
  bool saves_u_f32 = false;  // the recurrent backward's fp32 u (the chunked one reads `residual`)
  if (gpu_backward) HLA_CUDA_ONLY(saves_u_f32 = cuda::delta_rule_backward_reads_u_f32(d, dt, qv.raw(), kv.raw(), vv.raw()));
  Tensor u_f32 = saves_u_f32 ? Tensor::empty(o.shape(), DType::F32, dev) : Tensor();
  int64_t kept_floats = 0;
  if (gpu_backward && keep_states) HLA_CUDA_ONLY(kept_floats = cuda::delta_rule_kept_floats(d, dt));
  Tensor kept = kept_buffer(kept_floats, dev);
  delta_rule_forward(o, final_state, residual, qv, kv, vv, gv, bv, wv, h0, d, u_f32, kept);
  // documents: kept alive for d.doc_start, d.chunk_reset
  auto backward = [=, documents = keep](const std::vector<Tensor>& grads) mutable {
    Tensor dq = Tensor::empty(qv.shape(), dt, dev), dk = Tensor::empty(kv.shape(), dt, dev);
    Tensor dv = Tensor::empty(vv.shape(), dt, dev);
    Tensor dg = gv.defined() ? Tensor::empty(gv.shape(), dt, dev) : Tensor();
    Tensor db = Tensor::empty(bv.shape(), dt, dev), dw = Tensor::empty(wv.shape(), dt, dev);
    Tensor dh0 = h0.defined() ? Tensor::empty(h0.shape(), d.state_dtype, dev) : Tensor();
    delta_rule_backward(dq, dk, dv, dg, db, dw, dh0, grads[0], grads[1].to(d.state_dtype), grads[2], qv, kv, vv, gv,
                        bv, wv, h0, d, residual, u_f32, kept);
    kept = Tensor();  // consumed (the backward wrote over it): freed now; a second backward replays
    if (tied) {
      add_(db, dw);  // beta is both the erase and the write gate
      dw = Tensor();
    }
    // dh0 back in the initial state's dtype
    return std::vector<Tensor>{dq, dk, dv, dg, db, dw, dh0.defined() ? dh0.to(dt) : Tensor()};
  };
  std::vector<Var> outs = record_op({o, final_state, residual}, {q, k, v, g, b, w, initial_state},
                                    backward, "delta_rule");
  return {outs[0], outs[1], outs[2]};
}

}  // namespace

// Packed documents: the token recurrence resets the state at each document start (doc_start);
// the chunked forms (the CPU's, and the GPU's where its chunked kernels run) take the
// chunk-aligned layout instead (inputs gathered there, o and u scattered back, chunk_reset at
// the chunks that start a document), built once per chunk size by `documents`.
DeltaRuleOutputs delta_rule(const Var& q, const Var& k, const Var& v, const Var& g, const Var& b,
                            const Var& w, const Var& initial_state, const DeltaRuleOptions& options,
                            const DocumentStarts& documents) {
  const DeltaRuleDims d = check_inputs(q, k, v, g, b, w, initial_state, options);
  if (!documents.defined()) return delta_rule_rows(q, k, v, g, b, w, initial_state, d, options.keep_states, Tensor());
  // the layout's chunk size: the CPU's chunk_size, the GPU chunked kernels' (0: the token recurrence)
  int64_t chunk = options.chunk_size;
  if (q.value().is_cuda()) HLA_CUDA_ONLY(chunk = cuda::delta_rule_document_chunk(d, q.dtype()));
  // o and u have a token axis, the final state not
  std::vector<Var> outs = run_on_documents(
      "delta_rule", documents, d, chunk, q.device(), initial_state, {q, k, v, g, b, w}, 2,
      [&](const DeltaRuleDims& dd, const std::vector<Var>& x, const Tensor& keep) {
        DeltaRuleOutputs r = delta_rule_rows(x[0], x[1], x[2], x[3], x[4], x[5], Var(), dd, options.keep_states, keep);
        return std::vector<Var>{r.o, r.residual, r.final_state};
      });
  return {outs[0], outs[2], outs[1]};
}

}  // namespace hla
