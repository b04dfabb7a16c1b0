// Softmax attention layer (mixers.md section 5): q/k/v projections, RoPE on q and k, causal
// GQA attention with an optional sliding window, output projection. Used by the Transformer
// and by every attention layer of a hybrid.
#include "nn/layers/common.h"
#include "nn/layers/mixers.h"
#include "nn/ops/attention.h"
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

  Var forward(const Var& x, MixerIO&) override {
    int64_t B = x.size(0), T = x.size(1);
    Var q = reshape(linear(x, store_.use(q_)), {B, T, H_, d_});    // q: (B, T, H, d)
    Var k = reshape(linear(x, store_.use(k_)), {B, T, Hkv_, d_});  // k: (B, T, Hkv, d)
    Var v = reshape(linear(x, store_.use(v_)), {B, T, Hkv_, d_});  // v: (B, T, Hkv, d)
    q = rope(q, theta_);
    k = rope(k, theta_);
    Var o = attention(q, k, v, default_attention_scale(d_), window_);  // o: (B, T, H, d)
    return linear(reshape(o, {B, T, H_ * d_}), store_.use(o_));
  }

 private:
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
