// HybridLM (see model.h). The block follows mixers.md 3.1:
//   r = x ;  h = Mixer(RMSNorm_attn(r)) ;  r = r + h ;  y = r + GatedMLP(RMSNorm_mlp(r))
// with the exceptions of 3.4 (Mamba-2: no MLP, names under "backbone"; RWKV-6: LayerNorms
// with bias, an extra pre_norm on layer 0, the channel mix as FFN) and cross-layer routing
// of papers.md 3.5 added after a linear layer's block:
//   CLVR:   y += P_l v_l       CLER-H: y += P_l r_l       (P_l zero-initialised, no bias)
//   CLER:   the next linear layer's values become v + gamma * r_prev (gamma zero-initialised,
//           created here under the mixer's name, added inside the mixer)
// The model owns routing: a layer only sees MixerIO. The block style, the lower bounds and
// which routings a mixer serves are columns of the mixer table (nn/layers/mixers.h).
// Recompute (model.h) wraps each block's mixer, MLP or whole block in a checkpoint
// (autograd/checkpoint.h); routed values and errors leave a checkpoint as extra outputs.
// A residual add and the RMSNorm that reads its sum run as one op (add_rmsnorm) wherever no
// checkpoint lies between them; the values are the same either way.
#include "nn/model.h"

#include <algorithm>

#include "autograd/checkpoint.h"
#include "nn/layers/feedforward.h"
#include "nn/layers/mixers.h"
#include "nn/ops/arith.h"
#include "nn/ops/embedding.h"
#include "nn/ops/group_norm.h"
#include "nn/ops/last_tokens.h"
#include "nn/ops/linear.h"
#include "nn/ops/linear_cross_entropy.h"
#include "nn/ops/lower_bounds.h"
#include "nn/ops/rmsnorm.h"

namespace hla {
namespace {

// Vocabulary rows per block of the training loss (linear_cross_entropy): it holds one
// (B*T, 4096) block of logits, never the (B*T, V) ones, and 4096 keeps each GEMM large.
constexpr int64_t kLossVocabChunk = 4096;

// RMSNorm, or LayerNorm with bias (RWKV-6).
struct Norm {
  Var weight, bias;
  Var apply(const ParamStore& store, const Var& x, double eps) const {
    if (bias.defined()) return layer_norm(x, store.use(weight), store.use(bias), eps);
    return rmsnorm(x, store.use(weight), eps);
  }
};

struct Block {
  Norm pre_norm, attn_norm, mlp_norm;  // pre_norm: RWKV-6 layer 0 only
  std::unique_ptr<Mixer> mixer;
  std::unique_ptr<FeedForward> mlp;  // absent for Mamba-2
  Var route_proj;                 // CLVR / CLER-H projection (D, value_width), zero-initialised
  Var cler_gamma;                 // CLER: gamma (1), the routed error's scale, zero-initialised
  bool linear = false;
};

class HybridLM : public TrainableModel, public StatefulModel {
 public:
  HybridLM(const ModelConfig& c, uint64_t seed, Device device, DType compute, RecomputePlan recompute,
           bool keep_chunk_states)
      : config_(c), store_(seed, c.initializer_range, device, compute), recompute_(recompute),
        keep_chunk_states_(keep_chunk_states) {
    c.validate("model config");
    const MixerSpec& spec = c.mixer();
    mamba_ = spec.block == BlockStyle::Mamba2;
    rwkv_ = spec.block == BlockStyle::Rwkv6;
    const std::string root = mamba_ ? "backbone." : "model.";
    {
      ParamStore::Scope s(store_, root);
      embed_ = store_.normal("embeddings.weight", {c.vocab_size, c.hidden_size});
      if (spec.lower_bounds) lower_bounds_ = store_.constant("lower_bounds", {c.num_hidden_layers, c.hidden_size}, 0.0);
      for (int i = 0; i < c.num_hidden_layers; i++) blocks_.push_back(make_block(i));
      final_norm_ = make_norm(mamba_ ? "norm_f" : "norm");
    }
    if (!c.tie_word_embeddings) head_ = store_.normal("lm_head.weight", {c.vocab_size, c.hidden_size});
  }

  Var logits(const Tensor& ids) override { return linear(forward(ids, nullptr), head_weight()); }  // (B, T, V)

  // Every mixer stops at document starts (softmax attention, the delta rule, decay attention,
  // RWKV-6, HGRN, and their short convs and token shifts); the blocks' other parts (norms, MLP,
  // routing) are per token but RWKV-6's channel mix, whose token shift stops there too.
  bool takes_documents() const override { return true; }

  Var logits_in_documents(const Tensor& ids, const Documents& documents) override {
    return linear(forward(ids, nullptr, &checked(documents, ids)), head_weight());
  }

  Var loss_in_documents(const Tensor& ids, const Tensor& targets, const Documents& documents) override {
    return linear_cross_entropy(forward(ids, nullptr, &checked(documents, ids)), head_weight(), targets,
                                kLossVocabChunk);
  }

  Var logits_with_state(const Tensor& ids, ModelState& state) override {
    return linear(forward_with_state(ids, state), head_weight());
  }

  Var last_logits_with_state(const Tensor& ids, ModelState& state) override {
    Var h = forward_with_state(ids, state);  // h: (B, T, D)
    const int64_t B = h.size(0), T = h.size(1), D = h.size(2);
    const Padding* padding = state.layers.at(0).padding.get();
    const Tensor lengths =
        padding ? padding->lengths_device
                : Tensor::from_i32(std::vector<int32_t>(B, static_cast<int32_t>(T)), {B}).to(ids.device());
    return linear(Var(last_tokens(h.value(), lengths, 1).reshape({B, D})), head_weight());  // (B, V)
  }

  const ModelConfig& config() const override { return config_; }

  Var loss(const Tensor& ids, const Tensor& targets) override {
    return linear_cross_entropy(forward(ids, nullptr), head_weight(), targets, kLossVocabChunk);
  }

  ParameterList parameters() override { return store_.parameters(); }
  Device device() const override { return store_.device(); }

 private:
  Var head_weight() const { return store_.use(config_.tie_word_embeddings ? embed_ : head_); }  // (V, D)

  // forward() from a ModelState: every layer gets the call's positions and right padding.
  Var forward_with_state(const Tensor& ids, ModelState& state) {
    if (state.layers.empty()) state.layers.resize(blocks_.size());
    HLA_CHECK(state.layers.size() == blocks_.size(), "model state has ", state.layers.size(), " layers, the model ",
              blocks_.size());
    std::shared_ptr<const Padding> padding = state.lengths.empty() ? nullptr : make_padding(state.lengths, ids);
    for (LayerState& layer : state.layers) {
      layer.positions = state.positions;
      layer.padding = padding;
    }
    if (lower_bounds_.defined() && state.lower_bounds.empty()) state.lower_bounds = lower_bounds(lower_bounds_);
    return forward(ids, &state);
  }

  // The Padding of a right-padded call over ids (B, T): lengths[b] in [1, T].
  static std::shared_ptr<const Padding> make_padding(const std::vector<int64_t>& lengths, const Tensor& ids) {
    const int64_t B = ids.size(0), T = ids.size(1);
    HLA_CHECK(static_cast<int64_t>(lengths.size()) == B, "model state: ", lengths.size(), " lengths for a batch of ",
              B);
    auto p = std::make_shared<Padding>();
    p->lengths = lengths;
    std::vector<int32_t> lengths_i32;
    std::vector<double> valid(B * T, 0.0);
    for (int64_t b = 0; b < B; b++) {
      HLA_CHECK(lengths[b] >= 1 && lengths[b] <= T, "model state: lengths[", b, "] is ", lengths[b],
                ", must be in [1, ", T, "]");
      lengths_i32.push_back(static_cast<int32_t>(lengths[b]));
      std::fill_n(valid.begin() + b * T, lengths[b], 1.0);
    }
    p->lengths_device = Tensor::from_i32(lengths_i32, {B}).to(ids.device());
    p->valid = Tensor::from_f64(valid, {B * T}, DType::F32).to(ids.device());
    return p;
  }

  // documents, after checking that they fit ids (B, T).
  const Documents& checked(const Documents& documents, const Tensor& ids) const {
    for (const Tensor* t : {&documents.doc_start.tensor(), &documents.positions})
      HLA_CHECK(t->defined() && t->shape() == ids.shape() && t->dtype() == DType::I32 && t->device() == ids.device(),
                "packed documents: doc_start and positions must be I32 shaped like ids ", ids.str(), ", got ",
                t->defined() ? t->str() : std::string("undefined"));
    return documents;
  }

  // The forward of the blocks up to the final norm, (B, T, D); with a state (decoding) every
  // layer carries its part of it; with documents, each document of a row as if alone.
  Var forward(const Tensor& ids, ModelState* state, const Documents* documents = nullptr) {
    Var x = embedding(ids, store_.use(embed_));  // x: (B, T, D)
    std::vector<Var> lbs;
    if (state) lbs = state->lower_bounds;
    else if (lower_bounds_.defined()) lbs = lower_bounds(lower_bounds_);
    Var routed_error;  // CLER: carried across attention layers to the next linear layer
    Var normed;        // the next norm of x where the add that made x made it too (norm_after), else undefined
    for (size_t i = 0; i < blocks_.size(); i++) {
      Block& b = blocks_[i];
      const Recompute recompute = recompute_of(i, state);
      MixerIO io;
      if (state) io.state = &state->layers[i];
      io.keep_chunk_states = keep_chunk_states_;
      if (documents) io.documents = *documents;
      if (!lbs.empty()) io.lower_bound = store_.use(lbs[i]);
      io.want_values = config_.routing == Routing::Clvr && b.linear;
      io.want_error = (config_.routing == Routing::Cler || config_.routing == Routing::ClerH) && b.linear;
      if (b.cler_gamma.defined() && routed_error.defined())
        io.routed_error = scale_by(routed_error, store_.use(b.cler_gamma));  // gamma * r_prev
      if (recompute == Recompute::Layer) {
        x = run_part(true, "recompute layer", x, io, true, [this, &b, recompute](const Var& r, MixerIO& part_io) {
          return block_forward(b, r, part_io, recompute, Var(), nullptr).sum;
        });
        normed = Var();
      } else {
        ResidualNorm out = block_forward(b, x, io, recompute, normed, norm_after(i, state));
        x = out.sum;
        normed = out.normed;
      }
      if (io.error.defined()) routed_error = io.error;
    }
    return normed.defined() ? normed : final_norm_.apply(store_, x, config_.norm_eps);
  }

  // Block i's recompute choice; none with a state (a state must not advance twice).
  Recompute recompute_of(size_t i, const ModelState* state) const {
    return state ? Recompute::None : recompute_.of(blocks_[i].linear);
  }

  // The norm that block i's last residual add makes with it (add_norm): the next block's attn_norm,
  // or the final norm after the last block; null where a checkpoint lies between the two (block i
  // recomputed whole, or the next block's mixer recomputed with its norm).
  const Norm* norm_after(size_t i, const ModelState* state) const {
    if (recompute_of(i, state) == Recompute::Layer) return nullptr;
    if (i + 1 == blocks_.size()) return &final_norm_;
    const Recompute next = recompute_of(i + 1, state);
    return next == Recompute::Mixer || next == Recompute::Layer ? nullptr : &blocks_[i + 1].attn_norm;
  }

  // One block, x: (B, T, D) -> (B, T, D) as .sum; `recompute` Mixer or Mlp checkpoints that part.
  // normed: attn_norm(x) where the add that made x made it (else undefined); next: the norm the
  // block's last add makes with it (norm_after), as .normed.
  ResidualNorm block_forward(Block& b, Var x, MixerIO& io, Recompute recompute, const Var& normed, const Norm* next) {
    const double eps = config_.norm_eps;
    if (b.pre_norm.weight.defined()) x = b.pre_norm.apply(store_, x, eps);
    Var h = run_part(recompute == Recompute::Mixer, "recompute mixer", x, io, true,
                     [this, &b, eps, normed](const Var& r, MixerIO& part_io) {
                       return b.mixer->forward(normed.defined() ? normed : b.attn_norm.apply(store_, r, eps), part_io);
                     });
    if (b.mlp) {
      const ResidualNorm mid = add_norm(x, h, recompute == Recompute::Mlp ? nullptr : &b.mlp_norm);
      x = mid.sum;
      h = run_part(recompute == Recompute::Mlp, "recompute mlp", x, io, false,
                   [this, &b, eps, mlp_in = mid.normed](const Var& r, MixerIO& part_io) {
                     return b.mlp->forward_with_state(mlp_in.defined() ? mlp_in : b.mlp_norm.apply(store_, r, eps),
                                                      part_io.state, part_io.documents);
                   });
    }
    if (b.route_proj.defined()) {
      const Var& routed = config_.routing == Routing::Clvr ? io.values : io.error;
      x = add(x, h);
      h = linear(routed, store_.use(b.route_proj));
    }
    return add_norm(x, h, next);
  }

  // The residual add x + h, and `norm` of the sum where one is given: an RMSNorm in the same kernel
  // (add_rmsnorm), a LayerNorm (RWKV-6) after it.
  ResidualNorm add_norm(const Var& x, const Var& h, const Norm* norm) const {
    if (!norm) return {add(x, h), Var()};
    if (!norm->bias.defined()) return add_rmsnorm(x, h, store_.use(norm->weight), config_.norm_eps);
    Var sum = add(x, h);
    return {sum, norm->apply(store_, sum, config_.norm_eps)};
  }

  using Part = std::function<Var(const Var& x, MixerIO& io)>;
  // part(x, io), checkpointed when `recompute`. A part that `routes` fills io.values / io.error
  // where io wants them: under the checkpoint they are its extra outputs, set into io after.
  static Var run_part(bool recompute, const char* name, const Var& x, MixerIO& io, bool routes, Part part) {
    if (!recompute) return part(x, io);
    const MixerIO given = io;
    const bool values = routes && io.want_values, error = routes && io.want_error;
    auto fn = [part = std::move(part), given, values, error](const std::vector<Var>& in) {
      MixerIO part_io = given;
      std::vector<Var> out{part(in[0], part_io)};
      if (values) out.push_back(part_io.values);
      if (error) out.push_back(part_io.error);
      return out;
    };
    std::vector<Var> out = checkpoint(fn, {x}, name);
    if (values) io.values = out[1];
    if (error) io.error = out.back();
    return out[0];
  }

  Block make_block(int i) {
    Block b;
    b.linear = !config_.is_attention_layer(i);
    ParamStore::Scope layer(store_, "layers." + std::to_string(i) + ".");
    if (rwkv_ && i == 0) b.pre_norm = make_norm("pre_norm");
    b.attn_norm = make_norm(mamba_ ? "norm" : "attn_norm");
    {
      ParamStore::Scope mixer(store_, mamba_ ? "mixer." : "attn.");
      b.mixer = make_mixer(config_, i, store_);
      if (config_.routing == Routing::Cler && b.linear) b.cler_gamma = store_.constant("cler_gamma", {1}, 0.0);
    }
    if (!mamba_) {
      b.mlp_norm = make_norm(rwkv_ ? "ffn_norm" : "mlp_norm");
      b.mlp = make_feedforward(config_, store_);
    }
    // validate() has checked the mixer table: this mixer serves the routing.
    if ((config_.routing == Routing::Clvr || config_.routing == Routing::ClerH) && b.linear)
      b.route_proj = store_.constant("route_proj.weight", {config_.hidden_size, b.mixer->value_width()}, 0.0);
    return b;
  }

  Norm make_norm(const std::string& name) {
    Norm n;
    n.weight = store_.constant(name + ".weight", {config_.hidden_size}, 1.0);
    if (rwkv_) n.bias = store_.constant(name + ".bias", {config_.hidden_size}, 0.0);
    return n;
  }

  ModelConfig config_;
  ParamStore store_;
  RecomputePlan recompute_;
  bool keep_chunk_states_;
  bool mamba_ = false, rwkv_ = false;  // the mixer's block style
  Var embed_, head_, lower_bounds_;
  Norm final_norm_;
  std::vector<Block> blocks_;
};

}  // namespace

static Recompute parse_choice(const std::string& text, const std::string& field) {
  if (text == "none") return Recompute::None;
  if (text == "mixer") return Recompute::Mixer;
  if (text == "mlp") return Recompute::Mlp;
  HLA_CHECK_INPUT(text == "layer", field, ": '", text, "' is not a recompute choice (none | mixer | mlp | layer)");
  return Recompute::Layer;
}

RecomputePlan parse_recompute(const std::string& text, const std::string& field) {
  if (text.find('=') == std::string::npos) return parse_choice(text, field);
  RecomputePlan plan;
  bool linear_seen = false, attention_seen = false;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string part = text.substr(start, end - start);
    const size_t eq = part.find('=');
    HLA_CHECK_INPUT(eq != std::string::npos, field, ": '", part, "' in '", text,
                    "' is not KIND=CHOICE (KIND linear | attention; CHOICE none | mixer | mlp | layer)");
    const std::string kind = part.substr(0, eq), choice = part.substr(eq + 1);
    HLA_CHECK_INPUT(kind == "linear" || kind == "attention", field, ": '", kind, "' in '", text,
                    "' is not a layer kind (linear | attention)");
    bool& seen = kind == "linear" ? linear_seen : attention_seen;
    HLA_CHECK_INPUT(!seen, field, ": '", text, "' names ", kind, " twice");
    seen = true;
    (kind == "linear" ? plan.linear : plan.attention) = parse_choice(choice, field + " (" + kind + ")");
    start = end + 1;
  }
  return plan;
}

std::unique_ptr<TrainableModel> make_model(const ModelConfig& config, uint64_t seed, Device device,
                                           DType compute_dtype, RecomputePlan recompute, bool keep_chunk_states) {
  return std::make_unique<HybridLM>(config, seed, device, compute_dtype, recompute, keep_chunk_states);
}

}  // namespace hla
