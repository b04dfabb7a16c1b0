// Causal depthwise short convolution, forward and backward (mixers.md 2.6).
//
// Both passes read the extended sequence xe = [state ; x] of L + K - 1 inputs per (b, c):
// xe_e = state[b, c, e] for e < K-1 and x_{e-(K-1)} after, so output t reads xe_t .. xe_{t+K-1}
// with tap i on xe_{t+i}, and the final state is xe_L .. xe_{L+K-2}. The backward accumulates
// d(xe) and splits it back into dx and dstate; that is what lets a gradient flow through a
// state from one chunk of a sequence into the previous chunk.
#include "nn/ops/short_conv.h"

#include <cmath>
#include <utility>
#include <vector>

#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/short_conv.h"
#endif

namespace hla {
namespace cpu {

namespace {

template <class T> T sigmoid_of(T v) { return T(1) / (T(1) + std::exp(-v)); }

// xe_e for channel c of sequence b (see the file comment). state may be null (zeros).
template <class T>
T extended_input(const T* x, const T* state, int64_t b, int64_t e, int64_t c, int64_t L, int64_t C, int64_t K) {
  if (e >= K - 1) return x[(b * L + e - (K - 1)) * C + c];
  return state ? state[(b * C + c) * (K - 1) + e] : T(0);
}

// pre_t[c] = bias[c] + sum_i w[c, i] * xe_{t+i}[c]
template <class T>
T conv_pre(const T* x, const T* w, const T* bias, const T* state, int64_t b, int64_t t, int64_t c,
           int64_t L, int64_t C, int64_t K) {
  T pre = bias ? bias[c] : T(0);
  for (int64_t i = 0; i < K; i++) pre += w[c * K + i] * extended_input(x, state, b, t + i, c, L, C, K);
  return pre;
}

}  // namespace

template <class T>
void short_conv_forward(T* y, T* final_state, const T* x, const T* w, const T* bias, const T* state,
                        int64_t B, int64_t L, int64_t C, int64_t K, ConvAct act) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < L; t++)
      for (int64_t c = 0; c < C; c++) {
        T pre = conv_pre(x, w, bias, state, b, t, c, L, C, K);
        y[(b * L + t) * C + c] = act == ConvAct::SiLU ? pre * sigmoid_of(pre) : pre;  // y = act(pre)
      }
  for (int64_t b = 0; b < B; b++)  // final_state[b, c, j] = xe_{L+j}: the last K-1 inputs
    for (int64_t c = 0; c < C; c++)
      for (int64_t j = 0; j < K - 1; j++)
        final_state[(b * C + c) * (K - 1) + j] = extended_input(x, state, b, L + j, c, L, C, K);
}

template <class T>
void short_conv_backward(T* dx, T* dw, T* dbias, T* dstate, const T* dy, const T* dfinal, const T* x,
                         const T* w, const T* bias, const T* state, int64_t B, int64_t L, int64_t C,
                         int64_t K, ConvAct act) {
  std::vector<T> dxe(L + K - 1);  // dxe: (L + K - 1), d(xe) for one (b, c)
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++) {
      // final_state_j = xe_{L+j}  =>  dxe_{L+j} = dfinal_j
      for (int64_t e = 0; e < L + K - 1; e++) dxe[e] = e >= L ? dfinal[(b * C + c) * (K - 1) + e - L] : T(0);
      for (int64_t t = 0; t < L; t++) {
        T dpre = dy[(b * L + t) * C + c];
        if (act == ConvAct::SiLU) {  // y = pre * s(pre)  =>  dpre = dy * s * (1 + pre * (1 - s))
          T pre = conv_pre(x, w, bias, state, b, t, c, L, C, K), s = sigmoid_of(pre);
          dpre *= s * (T(1) + pre * (T(1) - s));
        }
        if (dbias) dbias[c] += dpre;  // pre = bias + ...  =>  dbias = sum_t dpre_t
        for (int64_t i = 0; i < K; i++) {  // pre_t = ... + w_i xe_{t+i}
          dw[c * K + i] += dpre * extended_input(x, state, b, t + i, c, L, C, K);
          dxe[t + i] += w[c * K + i] * dpre;
        }
      }
      for (int64_t t = 0; t < L; t++) dx[(b * L + t) * C + c] = dxe[t + K - 1];  // xe_{t+K-1} = x_t
      if (dstate)
        for (int64_t j = 0; j < K - 1; j++) dstate[(b * C + c) * (K - 1) + j] = dxe[j];  // xe_j = state_j
    }
}

template void short_conv_forward<float>(float*, float*, const float*, const float*, const float*, const float*,
                                        int64_t, int64_t, int64_t, int64_t, ConvAct);
template void short_conv_forward<double>(double*, double*, const double*, const double*, const double*,
                                         const double*, int64_t, int64_t, int64_t, int64_t, ConvAct);
template void short_conv_backward<float>(float*, float*, float*, float*, const float*, const float*, const float*,
                                         const float*, const float*, const float*, int64_t, int64_t, int64_t,
                                         int64_t, ConvAct);
template void short_conv_backward<double>(double*, double*, double*, double*, const double*, const double*,
                                          const double*, const double*, const double*, const double*, int64_t,
                                          int64_t, int64_t, int64_t, ConvAct);

}  // namespace cpu

#ifdef HLA_CUDA

// The same op on the GPU (cuda/short_conv.cu); weight, bias and state in x's dtype, on the GPU.
static ShortConvOut short_conv_cuda(const Var& x, const Var& weight, const Var& bias, const Var& initial_state,
                                    ConvAct act) {
  int64_t B = x.size(0), L = x.size(1), C = x.size(2), K = weight.size(2);
  Tensor xv = x.value(), wv = weight.value();
  Tensor bv = bias.defined() ? bias.value() : Tensor();
  Tensor sv = initial_state.defined() ? initial_state.value() : Tensor();
  const DType dt = xv.dtype();
  const std::pair<const Tensor*, const char*> operands[] = {{&wv, "weight"}, {&bv, "bias"}, {&sv, "initial_state"}};
  for (const auto& [t, name] : operands) {
    if (!t->defined()) continue;
    check_dtype(*t, dt, "short_conv", name);
    HLA_CHECK(t->is_cuda(), "short_conv: x is on cuda but ", name, " is on the cpu");
  }
  Tensor y = Tensor::empty({B, L, C}, dt, Device::CUDA);                 // y: (B, L, C)
  Tensor final_state = Tensor::empty({B, C, K - 1}, dt, Device::CUDA);  // final_state: (B, C, K-1)
  cuda::short_conv_forward(y.raw(), final_state.raw(), xv.raw(), wv.raw(), raw_or_null(bv), raw_or_null(sv), B, L, C,
                           K, act, dt);
  std::vector<Var> outs = record_op({y, final_state}, {x, weight, bias, initial_state},
                                    [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), dt, Device::CUDA);
    Tensor dw = Tensor::zeros(wv.shape(), dt, Device::CUDA);
    Tensor db = bv.defined() ? Tensor::zeros({C}, dt, Device::CUDA) : Tensor();
    Tensor ds = sv.defined() ? Tensor::empty(sv.shape(), dt, Device::CUDA) : Tensor();
    cuda::short_conv_backward(dx.raw(), dw.raw(), raw_or_null(db), raw_or_null(ds), g[0].raw(), g[1].raw(), xv.raw(),
                              wv.raw(), raw_or_null(bv), raw_or_null(sv), B, L, C, K, act, dt);
    return std::vector<Tensor>{dx, dw, db, ds};
  }, "short_conv");
  return {outs[0], outs[1]};
}
#endif

ShortConvOut short_conv(const Var& x, const Var& weight, const Var& bias, const Var& initial_state, ConvAct act) {
  HLA_CHECK(x.dim() == 3, "short_conv: x must be (B, L, C), got ", x.value().str());
  int64_t B = x.size(0), L = x.size(1), C = x.size(2);
  HLA_CHECK(weight.dim() == 3 && weight.size(0) == C && weight.size(1) == 1 && weight.size(2) >= 1,
            "short_conv: weight must be (C, 1, K) with C = ", C, " (fla's depthwise layout), got ",
            weight.value().str());
  int64_t K = weight.size(2);
  if (bias.defined()) check_shape(bias.value(), {C}, "short_conv", "bias");
  if (initial_state.defined()) check_shape(initial_state.value(), {B, C, K - 1}, "short_conv", "initial_state");
#ifdef HLA_CUDA
  if (x.value().is_cuda()) return short_conv_cuda(x, weight, bias, initial_state, act);
#endif
  Tensor xv = x.value(), wv = weight.value();
  Tensor bv = bias.defined() ? bias.value() : Tensor();
  Tensor sv = initial_state.defined() ? initial_state.value() : Tensor();
  Tensor y = Tensor::empty({B, L, C}, xv.dtype());                 // y: (B, L, C)
  Tensor final_state = Tensor::empty({B, C, K - 1}, xv.dtype());  // final_state: (B, C, K-1)
  dispatch_float(xv.dtype(), "short_conv", [&](auto tag) {
    using T = decltype(tag);
    cpu::short_conv_forward(y.data<T>(), final_state.data<T>(), xv.data<T>(), wv.data<T>(), data_or_null<T>(bv),
                            data_or_null<T>(sv), B, L, C, K, act);
  });
  std::vector<Var> outs = record_op({y, final_state}, {x, weight, bias, initial_state},
                                    [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype());
    Tensor dw = Tensor::zeros(wv.shape(), xv.dtype());
    Tensor db = bv.defined() ? Tensor::zeros({C}, xv.dtype()) : Tensor();
    Tensor ds = sv.defined() ? Tensor::empty(sv.shape(), xv.dtype()) : Tensor();
    dispatch_float(xv.dtype(), "short_conv", [&](auto tag) {
      using T = decltype(tag);
      cpu::short_conv_backward(dx.data<T>(), dw.data<T>(), db.defined() ? db.data<T>() : nullptr,
                               ds.defined() ? ds.data<T>() : nullptr, g[0].data<T>(), g[1].data<T>(),
                               xv.data<T>(), wv.data<T>(), data_or_null<T>(bv), data_or_null<T>(sv), B, L, C, K,
                               act);
    });
    return std::vector<Tensor>{dx, dw, db, ds};
  }, "short_conv");
  return {outs[0], outs[1]};
}

}  // namespace hla
