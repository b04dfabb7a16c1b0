// Mamba-2 (mixers.md section 10), with G = n_groups groups of B and C:
//   [z | xBC | dt] = W_in x ;  xBC = silu(conv(xBC) + b) ;  [x | B | C] = xBC, B and C (G, N)
//   Delta = softplus(dt + dt_bias) ;  g = Delta * A, A = -exp(A_log)   (scalar per head)
//   S_t = exp(g_t) S_{t-1} + B_t (Delta_t x_t)^T ;  y_t = S_t^T C_t + D x_t
//   out = W_out( RMSNorm( y * silu(z) ) )   or, with norm_before_gate, W_out( RMSNorm(y) * silu(z) )
// Names and layout are fla's Mamba2ForCausalLM: in_proj rows [z | xBC | dt], conv1d with bias,
// head h reads group h / (H / G) (consecutive heads share a group, as in mamba_ssm's kernels and
// fla's decoding step; fla's pure-torch prefill tiles the groups instead, h % G, which agrees
// only for G = 1), the norm over each group's d_inner / G channels.
// As a decay-attention call: q = C, k = B (G q/k heads), v = Delta * x (H value heads), scale 1.
#include "nn/layers/common.h"
#include "nn/layers/mixers.h"
#include "nn/ops/activation.h"
#include "nn/ops/decay_attention.h"
#include "nn/ops/gated_norm.h"
#include "nn/ops/gates.h"
#include "nn/ops/short_conv.h"

namespace hla {
namespace {

class Mamba2Layer : public Mixer {
 public:
  Mamba2Layer(const ModelConfig& c, ParamStore& store)
      : store_(store), eps_(c.norm_eps), chunk_(c.chunk_size),
        gate_order_(c.norm_before_gate ? GateOrder::NormThenGate : GateOrder::GateThenNorm) {
    int64_t D = c.hidden_size;
    inner_ = static_cast<int64_t>(D * c.expand_v);
    P_ = c.key_head_dim();
    HLA_CHECK(inner_ % P_ == 0, "mamba2: d_inner ", inner_, " (hidden_size * expand_v) is not a multiple of head_dim ", P_);
    H_ = inner_ / P_;
    N_ = c.state_size;
    G_ = c.n_groups;
    HLA_CHECK(H_ % G_ == 0, "mamba2: n_groups ", G_, " does not divide the ", H_, " heads");
    conv_dim_ = inner_ + 2 * G_ * N_;
    in_ = store.normal("in_proj.weight", {inner_ + conv_dim_ + H_, D});
    // Initialisation as fla's Mamba2Config says (common.h's table): conv_init, dt range,
    // A_init_range, rescale_prenorm_residual.
    const Shape conv_shape = {conv_dim_, 1, c.conv_size}, out_shape = {D, inner_};
    conv_ = c.conv_init > 0 ? store.uniform("conv1d.weight", conv_shape, -c.conv_init, c.conv_init)
                            : store.normal("conv1d.weight", conv_shape);
    conv_bias_ = store.constant("conv1d.bias", {conv_dim_}, 0.0);
    dt_bias_ = init_dt_bias(store, "dt_bias", H_, c.dt_min, c.dt_max, c.dt_init_floor);
    a_log_ = init_a_log(store, "A_log", H_, c.a_init_range.at(0), c.a_init_range.at(1));
    d_ = store.constant("D", {H_}, 1.0);
    norm_ = store.constant("norm.weight", {inner_}, 1.0);
    out_ = c.rescale_residual ? init_residual_out_proj(store, "out_proj.weight", out_shape, 1, c.num_hidden_layers)
                                      : store.normal("out_proj.weight", out_shape);
  }

  Var forward(const Var& x, MixerIO& io) override {
    int64_t B = x.size(0), T = x.size(1);
    std::vector<Var> parts = split_last(project(store_, x, in_), {inner_, conv_dim_, H_});
    const Var &z = parts[0], &dt = parts[2];
    Tensor* tail = tail_slot(io.state, 0);
    ShortConvOut conv = short_conv(parts[1], store_.use(conv_), store_.use(conv_bias_), initial_state(tail, parts[1]),
                                   ConvAct::SiLU, io.documents.doc_start.tensor());
    keep_last_inputs(tail, conv.final_state, parts[1], io.state);
    const Var& xbc = conv.y;
    std::vector<Var> xbc_parts = split_last(xbc, {inner_, G_ * N_, G_ * N_});
    const Var& xs = xbc_parts[0];                                              // (B, T, H*P)
    if (io.want_values) io.values = xs;
    Var Bk = reshape(xbc_parts[1], {B, T, G_, N_});                            // k = B: (B, T, G, N)
    Var Cq = reshape(xbc_parts[2], {B, T, G_, N_});                            // q = C: (B, T, G, N)
    Var delta = softplus(add_rows(dt, store_.use(dt_bias_)));                  // (B, T, H)
    Var g = ssm_gate(dt, store_.use(a_log_), store_.use(dt_bias_));            // Delta * A
    Var v = reshape(mul_broadcast(reshape(xs, {B * T * H_, P_}), reshape(delta, {B * T * H_}), P_),
                    {B, T, H_, P_});                                           // v = Delta * x
    Tensor* S = recurrent_slot(io.state);
    // padded tokens (a right-padded prefill) write nothing and decay nothing
    DecayAttentionOutput rec = decay_attention(Cq, zero_at_padding(Bk, io.state), v, zero_at_padding(g, io.state),
                                               initial_state(S, Cq), 1.0, chunk_, io.keep_chunk_states,
                                               io.documents.doc_start);
    keep_state(S, rec.final_state);
    Var y = rec.o;                                                             // (B, T, H, P)
    y = add(y, mul_broadcast(reshape(xs, {B, T, H_, P_}), store_.use(d_), P_));  // + D x
    Var normed = gated_rmsnorm(merge_heads(y), z, store_.use(norm_), eps_, GateAct::Swish, gate_order_,
                               inner_ / G_);
    return project(store_, normed, out_);
  }

  int64_t value_width() const override { return inner_; }

 private:
  ParamStore& store_;
  double eps_;
  int64_t chunk_, inner_, P_, H_, N_, G_, conv_dim_;
  GateOrder gate_order_;
  Var in_, conv_, conv_bias_, dt_bias_, a_log_, d_, norm_, out_;
};

}  // namespace

std::unique_ptr<Mixer> make_mamba2_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<Mamba2Layer>(c, store);
}

}  // namespace hla
