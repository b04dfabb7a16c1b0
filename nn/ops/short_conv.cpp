// Causal depthwise short convolution, forward and backward (mixers.md 2.6).
//
// Both passes read the extended sequence xe = [state ; x] of L + K - 1 inputs per (b, c):
// xe_e = state[b, c, e] for e < K-1 and x_{e-(K-1)} after, so output t reads xe_t .. xe_{t+K-1}
// with tap i on xe_{t+i}, and the final state is xe_L .. xe_{L+K-2}. The backward accumulates
// d(xe) and splits it back into dx and dstate; that is what lets a gradient flow through a
// state from one chunk of a sequence into the previous chunk.
// Packed documents only narrow the window: output t reads xe_e for e >= first_visible(b, t), the
// first extended index of t's document, and the final state xe_e for e >= first_visible(b, L-1);
// the backward skips the same taps (the transposed mask), so one code path serves both cases.
// The fused norm (d.norm_width > 0) is literally l2norm's forward on y after the convolution, and
// the backward l2norm's backward before the conv's: bit for bit short_conv then l2norm.
#include "nn/ops/short_conv.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/ops/attention.h"
#include "nn/ops/check.h"
#include "nn/ops/l2norm.h"
#include "nn/ops/parallel.h"
#include "nn/ops/pointwise.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/short_conv.h"
#endif

namespace hla {
namespace cpu {

namespace {

// xe: (L + K - 1), the extended sequence of channel c of sequence b (see the file comment).
// state may be null (zeros).
template <class T>
void load_extended(T* xe, const T* x, const T* state, int64_t b, int64_t c, int64_t L, int64_t C, int64_t K) {
  for (int64_t e = 0; e < K - 1; e++) xe[e] = state ? state[(b * C + c) * (K - 1) + e] : T(0);
  for (int64_t t = 0; t < L; t++) xe[K - 1 + t] = x[(b * L + t) * C + c];
}

// The first extended index output t of sequence b may read: xe_{doc_start + K-1} = x_{doc_start}
// (0 without documents: every tap).
inline int64_t first_visible(const ShortConvDims& d, int64_t b, int64_t t) {
  return d.doc_start ? d.doc_start[b * d.L + t] + d.K - 1 : 0;
}

// pre_t[c] = bias[c] + sum_i w[c, i] * xe_{t+i}[c] over the visible taps t + i >= first
template <class T>
T conv_pre(const T* xe, const T* w, const T* bias, int64_t t, int64_t c, int64_t K, int64_t first) {
  T pre = bias ? bias[c] : T(0);
  for (int64_t i = std::max<int64_t>(0, first - t); i < K; i++) pre += w[c * K + i] * xe[t + i];
  return pre;
}

}  // namespace

// One task per channel (parallel.h): a channel's outputs and its dw, dbias are its own.
template <class T>
void short_conv_forward(T* y, T* final_state, T* rstd, const T* x, const T* w, const T* bias, const T* state,
                        const ShortConvDims& d) {
  const int64_t B = d.B, L = d.L, C = d.C, K = d.K;
  const ConvAct act = d.act;
  parallel_for(C, [&](int64_t c) {
    std::vector<T> xe(L + K - 1);  // xe: (L + K - 1)
    for (int64_t b = 0; b < B; b++) {
      load_extended(xe.data(), x, state, b, c, L, C, K);
      for (int64_t t = 0; t < L; t++) {
        T pre = conv_pre(xe.data(), w, bias, t, c, K, first_visible(d, b, t));
        y[(b * L + t) * C + c] = act == ConvAct::SiLU ? pre * sigmoid_of(pre) : pre;  // y = act(pre)
      }
      // final_state[b, c, j] = xe_{L+j}: the last K-1 inputs (of the last document)
      const int64_t first_final = L > 0 ? first_visible(d, b, L - 1) : 0;
      for (int64_t j = 0; j < K - 1; j++)
        final_state[(b * C + c) * (K - 1) + j] = L + j >= first_final ? xe[L + j] : T(0);
    }
  });
  // y = l2norm(y) per (token, head of norm_width channels), in place (a row is read before it is written)
  if (d.norm_width > 0) l2norm_forward(y, rstd, y, B * L * C / d.norm_width, d.norm_width, d.norm_eps);
}

template <class T>
void short_conv_backward(T* dx, T* dw, T* dbias, T* dstate, const T* dy, const T* dfinal, const T* x,
                         const T* w, const T* bias, const T* state, const ShortConvDims& d) {
  const int64_t B = d.B, L = d.L, C = d.C, K = d.K;
  const ConvAct act = d.act;
  parallel_for(C, [&](int64_t c) {
    std::vector<T> xe(L + K - 1), dxe(L + K - 1);  // xe, dxe: (L + K - 1), xe and d(xe) of one (b, c)
    std::fill(dw + c * K, dw + (c + 1) * K, T(0));
    if (dbias) dbias[c] = T(0);
    for (int64_t b = 0; b < B; b++) {
      load_extended(xe.data(), x, state, b, c, L, C, K);
      // final_state_j = xe_{L+j}  =>  dxe_{L+j} = dfinal_j (where the final state reads it)
      const int64_t first_final = L > 0 ? first_visible(d, b, L - 1) : 0;
      for (int64_t e = 0; e < L + K - 1; e++)
        dxe[e] = e >= L && e >= first_final ? dfinal[(b * C + c) * (K - 1) + e - L] : T(0);
      for (int64_t t = 0; t < L; t++) {
        const int64_t first = first_visible(d, b, t);
        T dpre = dy[(b * L + t) * C + c];
        if (act == ConvAct::SiLU) {  // y = pre * s(pre)  =>  dpre = dy * s * (1 + pre * (1 - s))
          T pre = conv_pre(xe.data(), w, bias, t, c, K, first), s = sigmoid_of(pre);
          dpre *= s * (T(1) + pre * (T(1) - s));
        }
        if (dbias) dbias[c] += dpre;  // pre = bias + ...  =>  dbias = sum_t dpre_t
        for (int64_t i = std::max<int64_t>(0, first - t); i < K; i++) {  // pre_t = ... + w_i xe_{t+i}
          dw[c * K + i] += dpre * xe[t + i];
          dxe[t + i] += w[c * K + i] * dpre;
        }
      }
      for (int64_t t = 0; t < L; t++) dx[(b * L + t) * C + c] = dxe[t + K - 1];  // xe_{t+K-1} = x_t
      if (dstate)
        for (int64_t j = 0; j < K - 1; j++) dstate[(b * C + c) * (K - 1) + j] = dxe[j];  // xe_j = state_j
    }
  });
}

template void short_conv_forward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const ShortConvDims&);
template void short_conv_forward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const ShortConvDims&);
template void short_conv_backward<float>(float*, float*, float*, float*, const float*, const float*, const float*,
                                         const float*, const float*, const float*, const ShortConvDims&);
template void short_conv_backward<double>(double*, double*, double*, double*, const double*, const double*,
                                          const double*, const double*, const double*, const double*,
                                          const ShortConvDims&);

}  // namespace cpu

// One forward for both devices: cpu::short_conv_forward<T> or cuda::short_conv_forward.
// y, x: (B, L, C), w: (C, 1, K), bias: (C) or undefined, state, final_state: (B, C, K-1), state may be undefined,
// rstd: (B, L, C / d.norm_width) in accum_dtype(x), undefined when d.norm_width == 0
static void short_conv_forward(Tensor& y, Tensor& final_state, Tensor& rstd, const Tensor& x, const Tensor& w,
                               const Tensor& bias, const Tensor& state, const ShortConvDims& d) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::short_conv_forward(y.raw(), final_state.raw(), data_or_null<float>(rstd), x.raw(), w.raw(),
                                           raw_or_null(bias), raw_or_null(state), d, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "short_conv", [&](auto tag) {
    using T = decltype(tag);
    cpu::short_conv_forward(y.data<T>(), final_state.data<T>(), data_or_null<T>(rstd), x.data<T>(), w.data<T>(),
                            data_or_null<T>(bias), data_or_null<T>(state), d);
  });
}

// One backward for both devices; dx: (B, L, C), dw: (C, 1, K), dbias: (C), dstate: (B, C, K-1) written
// (dbias, dstate undefined when not wanted).
static void short_conv_backward(Tensor& dx, Tensor& dw, Tensor& dbias, Tensor& dstate, const Tensor& dy,
                                const Tensor& dfinal, const Tensor& x, const Tensor& w, const Tensor& bias,
                                const Tensor& state, const ShortConvDims& d) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::short_conv_backward(dx.raw(), dw.raw(), raw_or_null(dbias), raw_or_null(dstate), dy.raw(),
                                            dfinal.raw(), x.raw(), w.raw(), raw_or_null(bias), raw_or_null(state), d,
                                            x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "short_conv", [&](auto tag) {
    using T = decltype(tag);
    cpu::short_conv_backward(dx.data<T>(), dw.data<T>(), data_or_null<T>(dbias), data_or_null<T>(dstate),
                             dy.data<T>(), dfinal.data<T>(), x.data<T>(), w.data<T>(), data_or_null<T>(bias),
                             data_or_null<T>(state), d);
  });
}

ShortConvOut short_conv(const Var& x, const Var& weight, const Var& bias, const Var& initial_state, ConvAct act,
                        const Tensor& doc_start, int64_t norm_width) {
  HLA_CHECK(x.dim() == 3, "short_conv: x must be (B, L, C), got ", x.value().str());
  int64_t B = x.size(0), L = x.size(1), C = x.size(2);
  HLA_CHECK(weight.dim() == 3 && weight.size(0) == C && weight.size(1) == 1 && weight.size(2) >= 1,
            "short_conv: weight must be (C, 1, K) with C = ", C, " (fla's depthwise layout), got ",
            weight.value().str());
  int64_t K = weight.size(2);
  Tensor xv = x.value(), wv = weight.value();
  Tensor bv = bias.defined() ? bias.value() : Tensor();
  Tensor sv = initial_state.defined() ? initial_state.value() : Tensor();
  if (bv.defined()) check_shape(bv, {C}, "short_conv", "bias");
  if (sv.defined()) check_shape(sv, {B, C, K - 1}, "short_conv", "initial_state");
  check_operand(wv, xv, "short_conv", "weight");
  check_operand(bv, xv, "short_conv", "bias");
  check_operand(sv, xv, "short_conv", "initial_state");
  if (doc_start.defined()) {
    check_document_starts(doc_start, B, L, xv.device(), "short_conv");
    HLA_CHECK(!sv.defined(), "short_conv: with packed documents (doc_start) the initial state must be undefined, got ",
              sv.str());
  }
  HLA_CHECK(norm_width == 0 || (norm_width > 0 && C % norm_width == 0),
            "short_conv: norm_width must be 0 (no norm) or a positive divisor of C = ", C, ", got ", norm_width);
  ShortConvDims d{B, L, C, K, act};
  d.norm_width = norm_width;
  const int64_t heads = norm_width > 0 ? B * L * C / norm_width : 0;  // the normalised rows
  // d with doc_start's data (the backward closure holds a copy of doc_start, keeping it alive)
  auto with_documents = [](ShortConvDims dims, const Tensor& starts) {
    if (starts.defined()) dims.doc_start = starts.data<int32_t>();
    return dims;
  };
  Tensor y = Tensor::empty({B, L, C}, xv.dtype(), xv.device());                 // y: (B, L, C)
  Tensor final_state = Tensor::empty({B, C, K - 1}, xv.dtype(), xv.device());  // final_state: (B, C, K-1)
  Tensor rstd = norm_width > 0 ? Tensor::empty({heads}, accum_dtype(xv), xv.device()) : Tensor();  // rstd: (heads)
  short_conv_forward(y, final_state, rstd, xv, wv, bv, sv, with_documents(d, doc_start));
  const Tensor y_normed = norm_width > 0 ? y : Tensor();  // the norm's backward reads it (kept only with a norm)
  std::vector<Var> outs = record_op({y, final_state}, {x, weight, bias, initial_state},
                                    [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
    Tensor dw = Tensor::empty(wv.shape(), xv.dtype(), xv.device());
    Tensor db = bv.defined() ? Tensor::empty({C}, xv.dtype(), xv.device()) : Tensor();
    Tensor ds = sv.defined() ? Tensor::empty(sv.shape(), xv.dtype(), xv.device()) : Tensor();
    Tensor dy = g[0];  // d(act(pre)): through the norm's backward first when there is one
    if (norm_width > 0) {
      dy = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
      l2norm_backward(dy, g[0], y_normed, rstd, heads, norm_width);
    }
    short_conv_backward(dx, dw, db, ds, dy, g[1], xv, wv, bv, sv, with_documents(d, doc_start));
    return std::vector<Tensor>{dx, dw, db, ds};
  }, "short_conv");
  return {outs[0], outs[1]};
}

}  // namespace hla
