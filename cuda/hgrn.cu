// HGRN on the GPU: one thread per (batch, channel) walks the tokens, forwards for the output and
// backwards for the gradients, exactly as the CPU reference (nn/ops/hgrn.cpp):
//   forward:  h = exp(g_t) h + x_t;  o_t = h
//   backward: dh += do_t;  dx_t = dh;  dg_t = dh exp(g_t) h_{t-1};  dh = dh exp(g_t)
// with h_{t-1} read back from o (h0 at t = 0). Neighbouring threads own neighbouring channels,
// so every token's loads are coalesced; kAhead tokens are loaded before they are used so that
// the loads of a thread overlap. Packed documents (HgrnDims::doc_start, the kDocuments kernels):
// h = 0 before each document's first token t > 0; backwards h_{t-1} reads as 0 there and dh stops.
#include "cuda/common.cuh"
#include "cuda/hgrn.h"

namespace hla::cuda {
namespace {

constexpr int kAhead = 16;
constexpr int kBlock = 64;  // small blocks: B * D threads spread over every SM

// Whether token t of sequence b starts a packed document after the first token (h is zeroed before it).
template <bool kDocuments>
__device__ __forceinline__ bool starts_document(const int32_t* __restrict__ doc_start, int64_t b, int T, int t) {
  return kDocuments && t > 0 && t < T && doc_start[b * T + t] == t;
}

template <class S, bool kDocuments>
__global__ void hgrn_forward_kernel(S* __restrict__ o, float* __restrict__ ht, const S* __restrict__ x,
                                    const S* __restrict__ g, const float* __restrict__ h0,
                                    const int32_t* __restrict__ doc_start, int64_t B, int T, int D) {
  HLA_GRID_STRIDE(idx, B * D) {
    const int64_t base = (idx / D) * T * D + idx % D;  // (b, t = 0, d)
    float h = h0 ? h0[idx] : 0.f;
    for (int t0 = 0; t0 < T; t0 += kAhead) {
      float xs[kAhead], gs[kAhead];
      bool starts[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; u++) {
        const bool ok = t0 + u < T;
        xs[u] = ok ? to_float(x[base + int64_t(t0 + u) * D]) : 0.f;
        gs[u] = ok ? to_float(g[base + int64_t(t0 + u) * D]) : 0.f;
        starts[u] = starts_document<kDocuments>(doc_start, idx / D, T, t0 + u);
      }
#pragma unroll
      for (int u = 0; u < kAhead; u++)
        if (t0 + u < T) {
          if (starts[u]) h = 0.f;       // a document starts from h = 0
          h = expf(gs[u]) * h + xs[u];  // h_t = exp(g_t) h_{t-1} + x_t
          o[base + int64_t(t0 + u) * D] = from_float<S>(h);
        }
    }
    ht[idx] = h;
  }
}

template <class S, bool kDocuments>
__global__ void hgrn_backward_kernel(S* __restrict__ dx, S* __restrict__ dg, float* __restrict__ dh0,
                                     const S* __restrict__ dout, const float* __restrict__ dht,
                                     const S* __restrict__ g, const float* __restrict__ h0, const S* __restrict__ o,
                                     const int32_t* __restrict__ doc_start, int64_t B, int T, int D) {
  HLA_GRID_STRIDE(idx, B * D) {
    const int64_t base = (idx / D) * T * D + idx % D;
    const float h_init = h0 ? h0[idx] : 0.f;
    float dh = dht ? dht[idx] : 0.f;  // dL/dh_T
    for (int t1 = T - 1; t1 >= 0; t1 -= kAhead) {  // tokens t1, t1 - 1, .., t1 - kAhead + 1
      float dos[kAhead], gs[kAhead], hp[kAhead];
      bool starts[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; u++) {
        const int t = t1 - u;
        const bool ok = t >= 0;
        starts[u] = starts_document<kDocuments>(doc_start, idx / D, T, t);
        dos[u] = ok ? to_float(dout[base + int64_t(t) * D]) : 0.f;
        gs[u] = ok ? to_float(g[base + int64_t(t) * D]) : 0.f;
        hp[u] = starts[u] ? 0.f : t > 0 ? to_float(o[base + int64_t(t - 1) * D]) : h_init;  // h_{t-1}
      }
#pragma unroll
      for (int u = 0; u < kAhead; u++) {
        const int t = t1 - u;
        if (t < 0) break;
        const float decay = expf(gs[u]);
        dh += dos[u];                                                  // o_t = h_t
        dx[base + int64_t(t) * D] = from_float<S>(dh);                 // dx_t = dh_t
        dg[base + int64_t(t) * D] = from_float<S>(dh * decay * hp[u]); // dg_t = dh_t exp(g_t) h_{t-1}
        dh = starts[u] ? 0.f : dh * decay;                             // dh_{t-1} = dh_t exp(g_t)
      }
    }
    if (dh0) dh0[idx] = dh;
  }
}

}  // namespace

void hgrn_forward(void* o, float* ht, const void* x, const void* g, const float* h0, const HgrnDims& d, DType dtype) {
  const int64_t B = d.B, T = d.T, D = d.D;
  dispatch_storage(dtype, "hgrn_forward", [&](auto tag) {
    using S = decltype(tag);
    auto kernel = d.doc_start ? hgrn_forward_kernel<S, true> : hgrn_forward_kernel<S, false>;
    kernel<<<grid_1d(B * D, kBlock), kBlock>>>(static_cast<S*>(o), ht, static_cast<const S*>(x),
                                               static_cast<const S*>(g), h0, d.doc_start, B, static_cast<int>(T),
                                               static_cast<int>(D));
  });
  CUDA_CHECK_LAUNCH();
}

void hgrn_backward(void* dx, void* dg, float* dh0, const void* dout, const float* dht, const void* g, const float* h0,
                   const void* o, const HgrnDims& d, DType dtype) {
  const int64_t B = d.B, T = d.T, D = d.D;
  dispatch_storage(dtype, "hgrn_backward", [&](auto tag) {
    using S = decltype(tag);
    auto kernel = d.doc_start ? hgrn_backward_kernel<S, true> : hgrn_backward_kernel<S, false>;
    kernel<<<grid_1d(B * D, kBlock), kBlock>>>(static_cast<S*>(dx), static_cast<S*>(dg), dh0,
                                               static_cast<const S*>(dout), dht, static_cast<const S*>(g), h0,
                                               static_cast<const S*>(o), d.doc_start, B, static_cast<int>(T),
                                               static_cast<int>(D));
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hla::cuda
