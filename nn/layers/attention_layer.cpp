// Softmax attention layer (mixers.md section 5): q/k/v projections, RoPE on q and k, causal
// GQA attention with an optional sliding window, output projection. Used by the Transformer
// and by every attention layer of a hybrid. Packed documents (MixerIO::documents): RoPE at each
// token's place in its document, no key before the document's start.
// Decoding (MixerIO::state): the first call runs the same forward over the prompt and leaves
// its keys and values in the ring cache (KvCache); every later call is one token per sequence,
// RoPE at the sequence's position, against the cache (nn/ops/attention_decode.h).
#include <algorithm>

#include "nn/layers/common.h"
#include "nn/layers/mixers.h"
#include "nn/ops/attention.h"
#include "nn/ops/attention_decode.h"
#include "nn/ops/linear.h"
#include "nn/ops/rope.h"
#include "nn/ops/arith.h"

namespace hla {
namespace {

class AttentionLayer : public Mixer {
 public:
  AttentionLayer(const ModelConfig& c, ParamStore& store) : store_(store) {
    D_ = c.hidden_size;
    H_ = c.attn_heads();
    Hkv_ = c.attn_kv_heads();
    d_ = D_ / H_;
    theta_ = c.attn.rope_theta;
    window_ = c.attn.window_size;
    q_ = store.normal("q_proj.weight", {H_ * d_, D_});
    k_ = store.normal("k_proj.weight", {Hkv_ * d_, D_});
    v_ = store.normal("v_proj.weight", {Hkv_ * d_, D_});
    // fla's RWKV-6 model rescales its attention layers' residual projection (common.h's table).
    if (c.mixer().block == BlockStyle::Rwkv6)
      o_ = init_residual_out_proj(store, "o_proj.weight", {D_, H_ * d_}, 2, c.num_hidden_layers);
    else
      o_ = store.normal("o_proj.weight", {D_, H_ * d_});
  }

  Var forward(const Var& x, MixerIO& io) override {
    int64_t B = x.size(0), T = x.size(1);
    Var q = reshape(linear(x, store_.use(q_)), {B, T, H_, d_});    // q: (B, T, H, d)
    Var k = reshape(linear(x, store_.use(k_)), {B, T, Hkv_, d_});  // k: (B, T, Hkv, d)
    Var v = reshape(linear(x, store_.use(v_)), {B, T, Hkv_, d_});  // v: (B, T, Hkv, d)
    if (io.state && io.state->kv.k.defined()) return decode_step(q, k, v, *io.state);
    if (io.documents.doc_start.defined()) {  // each document from position 0, seeing only itself
      q = rope(q, theta_, io.documents.positions);
      k = rope(k, theta_, io.documents.positions);
    } else {
      q = rope(q, theta_);
      k = rope(k, theta_);
    }
    // o: (B, T, H, d)
    Var o = attention(q, k, v, default_attention_scale(d_), window_, io.documents.doc_start.tensor());
    if (io.state) fill_cache(io.state->kv, k.value(), v.value(), padding_of(io.state));
    return linear(reshape(o, {B, T, H_ * d_}), store_.use(o_));
  }

 private:
  // One token per sequence against the cache: q, k: (B, 1, heads, d) before RoPE.
  Var decode_step(const Var& q, const Var& k, const Var& v, LayerState& state) {
    const int64_t B = q.size(0);
    HLA_CHECK(q.size(1) == 1, "attention layer: a decoding step takes one token per sequence, got ", q.size(1));
    Tensor qr = rope(q, theta_, state.positions).value().reshape({B, H_, d_});
    Tensor kr = rope(k, theta_, state.positions).value().reshape({B, Hkv_, d_});
    Tensor o = attention_decode(qr, kr, v.value().reshape({B, Hkv_, d_}), state.kv.k, state.kv.v, state.positions,
                                default_attention_scale(d_), window_);  // o: (B, H, d)
    return linear(Var(o.reshape({B, 1, H_ * d_})), store_.use(o_));
  }

  // Each prompt's last min(T_b, capacity) keys and values into their slots t % capacity (a fresh
  // cache: the prompt starts at position 0); T_b = T, or the sequence's own length in a
  // right-padded call (its padding is never cached); k, v: (B, T, Hkv, d). Those positions fill
  // at most two runs of consecutive slots per sequence.
  void fill_cache(KvCache& kv, const Tensor& k, const Tensor& v, const Padding* padding) const {
    const int64_t B = k.size(0), T = k.size(1), C = kv.capacity, row = Hkv_ * d_;
    HLA_CHECK(C > 0, "attention layer: the KV cache has no capacity set");
    kv.k = Tensor::zeros({B, C, Hkv_, d_}, k.dtype(), k.device());
    kv.v = Tensor::zeros({B, C, Hkv_, d_}, v.dtype(), v.device());
    for (int64_t b = 0; b < B; b++) {
      const int64_t end = padding ? padding->lengths[b] : T;  // tokens of sequence b
      for (int64_t t = std::max<int64_t>(0, end - C); t < end;) {
        const int64_t slot = t % C, run = std::min(end - t, C - slot);  // tokens t .. t+run-1 -> slots slot ..
        for (auto [cache, src] : {std::pair<Tensor*, const Tensor*>{&kv.k, &k}, {&kv.v, &v}})
          cache->reshape({B * C, row}).slice0(b * C + slot, b * C + slot + run)
              .copy_(src->reshape({B * T, row}).slice0(b * T + t, b * T + t + run));
        t += run;
      }
    }
  }

  ParamStore& store_;
  int64_t D_, H_, Hkv_, d_, window_;
  double theta_;
  Var q_, k_, v_, o_;
};

}  // namespace

std::unique_ptr<Mixer> make_attention_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<AttentionLayer>(c, store);
}

}  // namespace hla
