// RWKV-6 (mixers.md section 11): the time mix (a decay linear attention that reads the state
// before the update, plus the bonus u) and the channel mix that replaces the MLP.
//
// Time mix:  delta = x_{t-1} - x_t ;  zz = W_x0 (x + mu_x delta)
//            xi^n = x + (W_x2[n] tanh(zz[n]) + x_bias[n]) * delta      n = r, w, k, v, g
//            r, k, v, gg = W xi^{r,k,v,g} ;  w = -exp(W_w2 tanh(W_w1 xi^w) + b_w)
//            o_t = S_{t-1}^T r_t + (r_t . (u * k_t)) v_t ;  S_t = Diag(e^w_t) S_{t-1} + k_t v_t^T
//            y = W_o( GroupNorm_H(o) * silu(gg) )
// Channel mix: kappa = relu(W_key lerp_k)^2 ;  y = sigmoid(W_rec lerp_r) * (W_value kappa)
#include <cmath>

#include "nn/layers/common.h"
#include "nn/layers/feedforward.h"
#include "nn/layers/mixers.h"
#include "nn/ops/activation.h"
#include "nn/ops/gates.h"
#include "nn/ops/group_norm.h"
#include "nn/ops/rwkv6.h"
#include "nn/ops/token_shift.h"

namespace hla {
namespace {

// delta = x_{t-1} - x_t, from the carried last token (zeros in training) and keeping the new one
// (each sequence's own last token in a right-padded call); x_{t-1} = 0 at each packed document's
// first token (documents.doc_start).
Var shifted(const Var& x, Tensor* last, const LayerState* state, const Documents& documents) {
  TokenShiftOut shift = token_shift(x, initial_state(last, x), documents.doc_start.tensor());
  keep_last_inputs(last, shift.last_token, x, state);
  return shift.delta;
}

class Rwkv6TimeMix : public Mixer {
 public:
  Rwkv6TimeMix(const ModelConfig& c, ParamStore& store) : store_(store), eps_(c.norm_eps), chunk_(c.chunk_size) {
    int64_t D = c.hidden_size, R = 32, lora = 64;
    H_ = c.num_heads;
    dk_ = static_cast<int64_t>(D * c.expand_k) / H_;
    dv_ = static_cast<int64_t>(D * c.expand_v) / H_;
    // The layer's own init (common.h's table): Linear weights xavier_uniform with gain 2^-2.5,
    // the decay LoRA zero-then-orthogonal, every mu, x_bias and bonus zero.
    const double gain = std::pow(2.0, -2.5);
    mu_x_ = store.constant("x_proj.0.mu", {D}, 0.0);
    x0_ = store.xavier_uniform("x_proj.0.linear.weight", {5 * R, D}, gain);
    x2_ = store.xavier_uniform("x_proj.2.weight", {D, 5 * R}, gain);
    x_bias_ = store.constant("x_bias", {5, D}, 0.0);
    r_ = store.xavier_uniform("r_proj.linear.weight", {H_ * dk_, D}, gain);
    w1_ = store.constant("w_proj.linear.lora.0.weight", {lora, D}, 0.0);
    const int64_t key_width = H_ * dk_;  // lora.2 is (key_width, lora)
    const double lora_gain = 0.1 * (lora > key_width ? std::sqrt(double(lora) / double(key_width)) : 1.0);
    w2_ = store.orthogonal("w_proj.linear.lora.2.weight", {key_width, lora}, lora_gain);
    w2_bias_ = store.constant("w_proj.linear.lora.2.bias", {key_width}, 0.0);
    k_ = store.xavier_uniform("k_proj.linear.weight", {H_ * dk_, D}, gain);
    v_ = store.xavier_uniform("v_proj.linear.weight", {H_ * dv_, D}, gain);
    g_ = store.xavier_uniform("g_proj.linear.weight", {H_ * dv_, D}, gain);
    bonus_ = store.constant("bonus", {H_, dk_}, 0.0);
    norm_w_ = store.constant("g_norm.weight", {H_ * dv_}, 1.0);
    norm_b_ = store.constant("g_norm.bias", {H_ * dv_}, 0.0);
    o_ = store.xavier_uniform("o_proj.weight", {D, H_ * dv_}, gain);
  }

  Var forward(const Var& x, MixerIO& io) override {
    Var delta = shifted(x, tail_slot(io.state, 0), io.state, io.documents);          // x_{t-1} - x_t
    Var zz = project(store_, lerp(x, delta, store_.use(mu_x_)), x0_);                // (B, T, 5R)
    std::vector<Var> xi = ddlerp(x, delta, zz, store_.use(x2_), store_.use(x_bias_));  // r, w, k, v, g
    Var r = split_heads(project(store_, xi[0], r_), H_, dk_);
    Var w = rwkv_gate(project(store_, tanh(project(store_, xi[1], w1_)), w2_, w2_bias_));  // w = -exp(lora)
    Var k = split_heads(project(store_, xi[2], k_), H_, dk_);
    Var v = project(store_, xi[3], v_);
    if (io.want_values) io.values = v;
    Var gg = project(store_, xi[4], g_);
    Tensor* S = recurrent_slot(io.state);
    // padded tokens (a right-padded prefill) write nothing and decay nothing
    Rwkv6Output rec = rwkv6(r, zero_at_padding(k, io.state), split_heads(v, H_, dv_),
                            zero_at_padding(split_heads(w, H_, dk_), io.state), store_.use(bonus_), initial_state(S, r),
                            1.0, chunk_, io.keep_chunk_states, io.documents.doc_start);
    keep_state(S, rec.final_state);
    const Var& o = rec.o;
    Var normed = group_norm(merge_heads(o), store_.use(norm_w_), store_.use(norm_b_), H_, eps_);
    return project(store_, mul(normed, silu(gg)), o_);
  }

  int64_t value_width() const override { return H_ * dv_; }

 private:
  ParamStore& store_;
  double eps_;
  int64_t chunk_, H_, dk_, dv_;
  Var mu_x_, x0_, x2_, x_bias_, r_, w1_, w2_, w2_bias_, k_, v_, g_, bonus_, norm_w_, norm_b_, o_;
};

class Rwkv6ChannelMix : public FeedForward {
 public:
  Rwkv6ChannelMix(const ModelConfig& c, ParamStore& store) : store_(store) {
    int64_t D = c.hidden_size;
    int64_t I = c.intermediate_size > 0 ? c.intermediate_size : 32 * ((static_cast<int64_t>(3.5 * D) + 31) / 32);
    key_mu_ = store.constant("key.mu", {D}, 0.0);  // the model's rules: mu 0, Linear weights N(0, std)
    key_ = store.normal("key.linear.weight", {I, D});
    value_ = store.normal("value.weight", {D, I});
    rec_mu_ = store.constant("receptance.mu", {D}, 0.0);
    rec_ = store.normal("receptance.linear.weight", {D, D});
  }

  Var forward(const Var& x) override { return forward_with_state(x, nullptr, Documents()); }

  Var forward_with_state(const Var& x, LayerState* state, const Documents& documents) override {
    Var delta = shifted(x, state ? &state->ffn_tail : nullptr, state, documents);
    Var kappa = relu_squared(project(store_, lerp(x, delta, store_.use(key_mu_)), key_));  // relu(W_key x_k)^2
    Var rho = project(store_, lerp(x, delta, store_.use(rec_mu_)), rec_);
    return mul(sigmoid(rho), project(store_, kappa, value_));
  }

 private:
  ParamStore& store_;
  Var key_mu_, key_, value_, rec_mu_, rec_;
};

}  // namespace

std::unique_ptr<Mixer> make_rwkv6_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<Rwkv6TimeMix>(c, store);
}

std::unique_ptr<FeedForward> make_rwkv6_channel_mix(const ModelConfig& c, ParamStore& store) {
  ParamStore::Scope s(store, "ffn.");
  return std::make_unique<Rwkv6ChannelMix>(c, store);
}

}  // namespace hla
