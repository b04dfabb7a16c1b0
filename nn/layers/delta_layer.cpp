// The delta-rule layers (mixers.md sections 12-15): DeltaNet, Gated DeltaNet, KDA and
// Gated DeltaNet-2 differ only in their gates, so one layer builds all four:
//
//   q, k, v = silu(conv(W x))  (plain silu without short convs);  q, k = l2norm(q), l2norm(k) (fused into the convs)
//   DeltaNet  beta = sigmoid(W_b x) [H]        no decay                 o_norm: RMSNorm_dv
//   GDN       beta = sigmoid(W_b x) [HV]       g = -e^A_log softplus(W_a x + dt_bias) [HV]
//                                                                       o_norm: RMSNorm_dv * swish(W_g x)
//   KDA       beta = sigmoid(W_b x) [HV]       g = -e^A_log softplus(W_f1 W_f0 x + dt_bias) [HV, dk]
//                                                                       o_norm: RMSNorm_dv * sigmoid(W_g1 W_g0 x + b)
//   GDN-2     b = sigmoid(W_b x) [H, dk], w = sigmoid(W_w x) [HV, dv], g as KDA but per QK head
//   S_t = (I - k (b*k)^T) Diag(e^g) S_{t-1} + k (w*v)^T ;  o_t = S_t^T q_t / sqrt(dk)
//
// Cross-layer routing (papers.md 3.5): CLER adds the model's gamma * r_prev to v (gamma init 0);
// the layer exposes v (CLVR) and the write residual r_t = beta (v - S'^T k) (CLER, CLER-H).
// Packed documents (MixerIO::documents): the short convs and the recurrence stop at each
// document start (their doc_start); l2norm and the gates are per token.
#include "nn/layers/common.h"
#include "nn/layers/mixers.h"
#include "nn/ops/activation.h"
#include "nn/ops/delta_rule.h"
#include "nn/ops/gated_norm.h"
#include "nn/ops/gates.h"
#include "nn/ops/l2norm.h"
#include "nn/ops/rmsnorm.h"
#include "nn/ops/short_conv.h"

namespace hla {
namespace {

enum class DeltaKind { DeltaNet, GatedDeltaNet, Kda, Gdn2 };

class DeltaLayer : public Mixer {
 public:
  // Grouped value heads (HV a multiple of H, HV != H) are validated by the mixer table's
  // num_v_heads column: gated_deltanet and kda only.
  DeltaLayer(DeltaKind kind, const ModelConfig& c, ParamStore& store)
      : store_(store), kind_(kind), eps_(c.norm_eps), chunk_(c.chunk_size), short_conv_(c.use_short_conv) {
    int64_t D = c.hidden_size;
    H_ = c.num_heads;
    HV_ = c.value_heads();
    dk_ = c.key_head_dim();
    dv_ = static_cast<int64_t>(dk_ * c.expand_v);
    q_ = store.normal("q_proj.weight", {H_ * dk_, D});
    k_ = store.normal("k_proj.weight", {H_ * dk_, D});
    v_ = store.normal("v_proj.weight", {HV_ * dv_, D});
    if (short_conv_) {
      q_conv_ = store.normal("q_conv1d.weight", {H_ * dk_, 1, c.conv_size});
      k_conv_ = store.normal("k_conv1d.weight", {H_ * dk_, 1, c.conv_size});
      v_conv_ = store.normal("v_conv1d.weight", {HV_ * dv_, 1, c.conv_size});
    }
    make_gate_params(store, D);
    o_ = store.normal("o_proj.weight", {D, HV_ * dv_});
  }

  Var forward(const Var& x, MixerIO& io) override {
    Tensor *q_tail = tail_slot(io.state, 0), *k_tail = tail_slot(io.state, 1), *v_tail = tail_slot(io.state, 2);
    const Tensor& doc_start = io.documents.doc_start.tensor();  // (B, T) or undefined; q, k below: (B, T, H, dk)
    Var q = normalised_heads(project(store_, x, q_), q_conv_, q_tail, io.state, doc_start);
    Var k = normalised_heads(project(store_, x, k_), k_conv_, k_tail, io.state, doc_start);
    Var v = conv_silu(project(store_, x, v_), v_conv_, v_tail, io.state, doc_start);  // (B, T, HV*dv)
    if (io.routed_error.defined()) v = add(v, io.routed_error);                        // v + gamma * r_prev
    if (io.want_values) io.values = v;
    Var g, b, w;
    gates(x, g, b, w);
    DeltaRuleOptions opt;
    opt.chunk_size = chunk_;
    opt.keep_states = io.keep_chunk_states;
    Tensor* S = recurrent_slot(io.state);
    // padded tokens (a right-padded prefill) erase and write nothing (k = 0) and decay nothing (g = 0)
    DeltaRuleOutputs out = delta_rule(q, zero_at_padding(k, io.state), split_heads(v, HV_, dv_),
                                      zero_at_padding(g, io.state), b, w, initial_state(S, q), opt,
                                      io.documents.doc_start);
    keep_state(S, out.final_state);
    if (io.want_error) io.error = merge_heads(out.residual);
    return project(store_, merge_heads(output_norm(x, out.o)), o_);
  }

  int64_t value_width() const override { return HV_ * dv_; }

 private:
  // silu(conv(x)) carrying the conv tail in `tail` (null in training), or silu(x) without convs;
  // doc_start: packed documents, or undefined. norm_width > 0: the conv's y l2-normalised per
  // group of that many channels in the conv's kernel (short_conv's fused norm).
  Var conv_silu(const Var& x, const Var& weight, Tensor* tail, const LayerState* state, const Tensor& doc_start,
                int64_t norm_width = 0) const {
    if (!weight.defined()) return silu(x);
    ShortConvOut out =
        short_conv(x, store_.use(weight), Var(), initial_state(tail, x), ConvAct::SiLU, doc_start, norm_width);
    keep_last_inputs(tail, out.final_state, x, state);
    return out.y;
  }
  // q or k: l2norm(silu(conv(x))) per head, (B, T, H, dk); the norm fused into the conv, or silu
  // then l2norm without convs.
  Var normalised_heads(const Var& x, const Var& weight, Tensor* tail, const LayerState* state,
                       const Tensor& doc_start) const {
    if (!weight.defined()) return l2norm(split_heads(silu(x), H_, dk_));
    return split_heads(conv_silu(x, weight, tail, state, doc_start, dk_), H_, dk_);
  }

  void make_gate_params(ParamStore& store, int64_t D) {
    int64_t low = dv_;  // low-rank width of f_proj / g_proj (KDA, GDN-2)
    switch (kind_) {
      case DeltaKind::DeltaNet:
        b_ = store.normal("b_proj.weight", {H_, D});
        norm_ = store.constant("o_norm.weight", {dv_}, 1.0);
        break;
      case DeltaKind::GatedDeltaNet:
        a_ = store.normal("a_proj.weight", {HV_, D});
        b_ = store.normal("b_proj.weight", {HV_, D});
        a_log_ = init_a_log(store, "A_log", HV_, 0.0, 16.0);  // fla's GDN: A ~ U(0, 16)
        dt_bias_ = init_dt_bias(store, "dt_bias", HV_);
        g_ = store.normal("g_proj.weight", {HV_ * dv_, D});
        norm_ = store.constant("o_norm.weight", {dv_}, 1.0);
        break;
      case DeltaKind::Kda:
      case DeltaKind::Gdn2: {
        int64_t gate_heads = kind_ == DeltaKind::Kda ? HV_ : H_;
        f0_ = store.normal("f_proj.0.weight", {low, D});
        f1_ = store.normal("f_proj.1.weight", {gate_heads * dk_, low});
        if (kind_ == DeltaKind::Kda) {
          b_ = store.normal("b_proj.weight", {HV_, D});
        } else {
          b_ = store.normal("b_proj.weight", {H_ * dk_, D});
          w_ = store.normal("w_proj.weight", {HV_ * dv_, D});
        }
        a_log_ = init_a_log(store, "A_log", gate_heads, 1.0, 16.0);
        dt_bias_ = init_dt_bias(store, "dt_bias", gate_heads * dk_);
        g0_ = store.normal("g_proj.0.weight", {low, D});
        g1_ = store.normal("g_proj.1.weight", {HV_ * dv_, low});
        g1_bias_ = store.constant("g_proj.1.bias", {HV_ * dv_}, 0.0);
        norm_ = store.constant("o_norm.weight", {dv_}, 1.0);
        break;
      }
    }
  }

  // g: log decay, b: erase (beta), w: write gate (undefined = b) for this mixer.
  void gates(const Var& x, Var& g, Var& b, Var& w) const {
    switch (kind_) {
      case DeltaKind::DeltaNet:
        b = sigmoid(project(store_, x, b_));  // (B, T, H)
        break;
      case DeltaKind::GatedDeltaNet: {
        const std::vector<Var> ab = project_stacked(store_, x, {a_, b_});  // a_proj, b_proj: one GEMM
        b = sigmoid(ab[1]);                                                  // (B, T, HV)
        g = ssm_gate(ab[0], store_.use(a_log_), store_.use(dt_bias_));       // (B, T, HV)
        break;
      }
      case DeltaKind::Kda:
      case DeltaKind::Gdn2: {
        Var beta_logits = project(store_, x, b_);
        Var f = project(store_, project(store_, x, f0_), f1_);
        Var gf = ssm_gate(f, store_.use(a_log_), store_.use(dt_bias_));  // (B, T, heads*dk)
        g = split_heads(gf, gf.size(2) / dk_, dk_);
        if (kind_ == DeltaKind::Kda) {
          b = sigmoid(beta_logits);  // (B, T, HV)
        } else {
          b = split_heads(sigmoid(beta_logits), H_, dk_);                  // erase (B, T, H, dk)
          w = split_heads(sigmoid(project(store_, x, w_)), HV_, dv_);     // write (B, T, HV, dv)
        }
        break;
      }
    }
  }

  Var output_norm(const Var& x, const Var& o) const {  // o: (B, T, HV, dv)
    switch (kind_) {
      case DeltaKind::DeltaNet: return rmsnorm(o, store_.use(norm_), eps_);
      case DeltaKind::GatedDeltaNet:
        return gated_rmsnorm(o, split_heads(project(store_, x, g_), HV_, dv_), store_.use(norm_), eps_, GateAct::Swish);
      default: {
        Var gate = project(store_, project(store_, x, g0_), g1_, g1_bias_);
        return gated_rmsnorm(o, split_heads(gate, HV_, dv_), store_.use(norm_), eps_, GateAct::Sigmoid);
      }
    }
  }

  ParamStore& store_;
  DeltaKind kind_;
  double eps_;
  int64_t chunk_;
  bool short_conv_;
  int64_t H_, HV_, dk_, dv_;
  Var q_, k_, v_, q_conv_, k_conv_, v_conv_, o_, norm_;
  Var a_, b_, w_, a_log_, dt_bias_, g_, f0_, f1_, g0_, g1_, g1_bias_;
};

}  // namespace

std::unique_ptr<Mixer> make_delta_net_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<DeltaLayer>(DeltaKind::DeltaNet, c, store);
}
std::unique_ptr<Mixer> make_gated_deltanet_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<DeltaLayer>(DeltaKind::GatedDeltaNet, c, store);
}
std::unique_ptr<Mixer> make_kda_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<DeltaLayer>(DeltaKind::Kda, c, store);
}
std::unique_ptr<Mixer> make_gdn2_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<DeltaLayer>(DeltaKind::Gdn2, c, store);
}

}  // namespace hla
