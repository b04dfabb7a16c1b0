// Decoding state arithmetic and the Decoder (see decode.h).
//
// The decoder keeps one ModelState (nn/model.h) for the batch. Prefill runs groups of prompts of
// similar length (sorted, up to prefill_tokens padded tokens a group) right-padded through the
// model's forward from a fresh state and stacks the per-sequence states along the batch, in the
// prompts' order. A step writes the tokens and positions into two fixed device buffers, runs
// the forward (T = 1) from the state, and keeps the state the layers leave. On the GPU the
// first step of a batch runs plainly (it warms the allocator and the layers' caches), the
// second is captured into a CUDA graph whose kernels read those buffers and the state tensors
// at fixed addresses; it then writes each new state back into the tensor it started from, so
// every later step is one graph replay. A new prefill drops the graph.
#include "nn/decode.h"

#include <algorithm>
#include <numeric>

#include "autograd/var.h"
#include "nn/layers/mixers.h"
#include "nn/model.h"
#ifdef HLA_CUDA
#include "cuda/graph.h"
#endif

namespace hla {
namespace {

// The recurrent state's heads and widths of a linear layer, from the mixer table's head shape
// (the same rules the layers apply): S is (HV, dk, dv) per sequence, the short convolution runs
// over q and k (qk_heads * dk each) and v (HV * dv).
struct StateShape {
  int64_t qk_heads = 0, v_heads = 0, dk = 0, dv = 0;
};

StateShape state_shape(const ModelConfig& c) {
  const int64_t D = c.hidden_size, H = c.num_heads;
  StateShape s;
  switch (c.mixer().heads) {
    case HeadShape::None: break;  // HGRN: D scalar states, no heads
    case HeadShape::Expand:
      s = {H, H, static_cast<int64_t>(D * c.expand_k) / H, static_cast<int64_t>(D * c.expand_v) / H};
      break;
    case HeadShape::Split: s = {H, H, D / H, D / H}; break;
    case HeadShape::HeadDim:
      s = {H, c.value_heads(), c.key_head_dim(), static_cast<int64_t>(c.key_head_dim() * c.expand_v)};
      break;
    case HeadShape::InnerByP: {  // Mamba-2: n_groups B/C heads of width N, inner / P value heads
      const int64_t inner = static_cast<int64_t>(D * c.expand_v), P = c.key_head_dim();
      s = {c.n_groups, inner / P, c.state_size, P};
      break;
    }
  }
  return s;
}

// parts[i]: (n_i, ...) -> (sum n_i, ...), one copy per part.
Tensor concat0(const std::vector<Tensor>& parts) {
  Shape shape = parts[0].shape();
  shape[0] = 0;
  for (const Tensor& t : parts) shape[0] += t.size(0);
  Tensor out = Tensor::empty(shape, parts[0].dtype(), parts[0].device());
  int64_t row = 0;
  for (const Tensor& t : parts) {
    out.slice0(row, row + t.size(0)).copy_(t);
    row += t.size(0);
  }
  return out;
}

// Every tensor a state holds, with whether it is a KV cache (the rest counts as state bytes).
template <class State, class Fn>
void for_each_state_tensor(State& s, Fn&& fn) {
  for (auto& layer : s.layers) {
    fn(layer.recurrent, false);
    for (auto& t : layer.tails) fn(t, false);
    fn(layer.ffn_tail, false);
    fn(layer.kv.k, true);
    fn(layer.kv.v, true);
  }
}

// Sequence g of a batch state: every tensor's row g (views).
ModelState slice_state(ModelState s, int64_t g) {
  for_each_state_tensor(s, [&](Tensor& t, bool) {
    if (t.defined()) t = t.slice0(g, g + 1);
  });
  return s;
}

// The states of one sequence each, stacked into one batch state in the same order.
ModelState stack_states(std::vector<ModelState>& singles) {
  ModelState out = singles[0];
  std::vector<Tensor*> slots;
  for_each_state_tensor(out, [&](Tensor& t, bool) { slots.push_back(&t); });
  std::vector<std::vector<Tensor>> parts(slots.size());
  for (ModelState& s : singles) {
    size_t i = 0;
    for_each_state_tensor(s, [&](Tensor& t, bool) { parts[i++].push_back(t); });
    HLA_CHECK(i == slots.size(), "decoder: the sequences of a batch left states of different layouts");
  }
  for (size_t i = 0; i < slots.size(); i++)
    if (slots[i]->defined()) *slots[i] = concat0(parts[i]);
  return out;
}

class ModelDecoder : public Decoder {
 public:
  ModelDecoder(StatefulModel& model, Device device, int64_t max_context, bool cuda_graph, int64_t prefill_tokens)
      : model_(model), config_(model.config()), device_(device), max_context_(max_context),
        prefill_tokens_(prefill_tokens), use_graph_(cuda_graph && device == Device::CUDA) {
    HLA_CHECK_INPUT(max_context >= 1, "decoder: max_context must be >= 1, got ", max_context);
    HLA_CHECK_INPUT(prefill_tokens >= 1, "decoder: prefill_tokens must be >= 1, got ", prefill_tokens);
    const int window = config_.attn.window_size;
    capacity_ = window > 0 ? std::min<int64_t>(window, max_context) : max_context;
    for (int i = 0; i < config_.num_hidden_layers; i++)
      bounded_ = bounded_ || (config_.is_attention_layer(i) && (window == 0 || window > max_context));
  }

  Tensor prefill(const std::vector<std::vector<int32_t>>& prompts) override {
    NoGradGuard no_grad;
    HLA_CHECK_INPUT(!prompts.empty(), "decoder: prefill needs at least one prompt");
    for (size_t b = 0; b < prompts.size(); b++) {
      HLA_CHECK_INPUT(!prompts[b].empty(), "decoder: prompt ", b, " is empty (a prompt needs at least one token)");
      HLA_CHECK_INPUT(!bounded_ || static_cast<int64_t>(prompts[b].size()) <= max_context_, "decoder: prompt ", b,
                      " has ", prompts[b].size(), " tokens, more than max_context ", max_context_);
      check_tokens(prompts[b], "prompt " + std::to_string(b));
    }
#ifdef HLA_CUDA
    graph_.reset();
#endif
    // Prompts by length (stable: equal lengths keep their order), cut into groups of at most
    // prefill_tokens_ padded tokens; each group is one right-padded forward from a fresh state.
    const int64_t B = static_cast<int64_t>(prompts.size());
    std::vector<size_t> order(B);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return prompts[a].size() < prompts[b].size(); });
    std::vector<ModelState> singles(B);
    std::vector<Tensor> rows(B);  // per prompt: (1, V) logits after its last token
    std::vector<Var> lower_bounds;
    for (size_t first = 0; first < order.size();) {
      size_t last = first + 1;  // the group is order[first, last); sorted, so its longest prompt is the last
      auto padded_tokens = [&](size_t end) {  // of the group order[first, end)
        return static_cast<int64_t>((end - first) * prompts[order[end - 1]].size());
      };
      while (last < order.size() && padded_tokens(last + 1) <= prefill_tokens_) last++;
      const std::vector<size_t> members(order.begin() + first, order.begin() + last);
      ModelState s = fresh_state(static_cast<int64_t>(members.size()));
      s.lower_bounds = lower_bounds;
      Tensor z = prefill_group(prompts, members, s);  // (G, V)
      lower_bounds = s.lower_bounds;
      for (size_t g = 0; g < members.size(); g++) {
        rows[members[g]] = z.slice0(g, g + 1).to(DType::F32);
        singles[members[g]] = slice_state(s, g);
      }
      first = last;
    }
    state_ = stack_states(singles);
    state_.lengths.clear();  // the steps are unpadded
    positions_ = Tensor::zeros({B}, DType::I32, device_);
    ids_ = Tensor::zeros({B, 1}, DType::I32, device_);
    state_.positions = positions_;
    lengths_.clear();
    for (const auto& p : prompts) lengths_.push_back(static_cast<int64_t>(p.size()));
    steps_ = 0;
    return concat0(rows);
  }

  Tensor step(const std::vector<int32_t>& tokens) override {
    NoGradGuard no_grad;
    const size_t B = lengths_.size();
    HLA_CHECK_INPUT(B > 0, "decoder: step before prefill");
    HLA_CHECK_INPUT(tokens.size() == B, "decoder: step got ", tokens.size(), " tokens for a batch of ", B);
    check_tokens(tokens, "step");
    std::vector<int32_t> positions(B);
    for (size_t b = 0; b < B; b++) {
      HLA_CHECK_INPUT(!bounded_ || lengths_[b] < max_context_, "decoder: sequence ", b, " already holds ", lengths_[b],
                      " tokens, the max_context of its full-attention KV cache");
      positions[b] = static_cast<int32_t>(lengths_[b]);
    }
    ids_.copy_(Tensor::from_i32(tokens, {static_cast<int64_t>(B), 1}));
    positions_.copy_(Tensor::from_i32(positions, {static_cast<int64_t>(B)}));
    Tensor out = run_step();
    for (int64_t& n : lengths_) n++;
    return out;
  }

  const std::vector<int64_t>& lengths() const override { return lengths_; }

  DecodeMemory memory() const override {
    DecodeMemory m;
    for_each_state_tensor(state_, [&](const Tensor& t, bool kv) {
      if (t.defined()) (kv ? m.kv_bytes : m.state_bytes) += static_cast<int64_t>(t.nbytes());
    });
    return m;
  }

 private:
  void check_tokens(const std::vector<int32_t>& tokens, const std::string& what) const {
    for (size_t i = 0; i < tokens.size(); i++)
      HLA_CHECK_INPUT(tokens[i] >= 0 && tokens[i] < config_.vocab_size, "decoder: ", what, ": token ", i, " is ",
                      tokens[i], ", outside the vocabulary [0, ", config_.vocab_size, ")");
  }

  // One right-padded forward over prompts[members] from the fresh state s (padding only when
  // their lengths differ): (G, V) logits after each prompt's last token; s is left holding the state.
  Tensor prefill_group(const std::vector<std::vector<int32_t>>& prompts, const std::vector<size_t>& members,
                       ModelState& s) {
    const int64_t G = static_cast<int64_t>(members.size()), L = static_cast<int64_t>(prompts[members.back()].size());
    std::vector<int32_t> ids(G * L, 0);  // ids: (G, L), token 0 after each prompt
    for (int64_t g = 0; g < G; g++) {
      const std::vector<int32_t>& p = prompts[members[g]];
      std::copy(p.begin(), p.end(), ids.begin() + g * L);
      s.lengths.push_back(static_cast<int64_t>(p.size()));
    }
    if (prompts[members.front()].size() == prompts[members.back()].size()) s.lengths.clear();  // no padding
    return model_.last_logits_with_state(Tensor::from_i32(ids, {G, L}).to(device_), s).value();
  }

  ModelState fresh_state(int64_t B) const {
    ModelState s;
    s.layers.resize(config_.num_hidden_layers);
    for (int i = 0; i < config_.num_hidden_layers; i++)
      if (config_.is_attention_layer(i)) s.layers[i].kv.capacity = capacity_;
    s.positions = Tensor::zeros({B}, DType::I32, device_);
    return s;
  }

  // One forward from state_ over ids_ at positions_: (B, V) fp32 logits; state_ updated.
  Tensor forward_step() {
    Tensor z = model_.logits_with_state(ids_, state_).value();  // (B, 1, V)
    return z.reshape({z.size(0), z.size(2)}).to(DType::F32);
  }

#ifdef HLA_CUDA
  // Warm-up step, then capture (and run) the graph, then replays.
  Tensor run_step() {
    if (!use_graph_ || steps_++ == 0) return forward_step();
    if (!graph_) capture();
    graph_->replay();
    return graph_logits_.clone();  // the graph's own buffer is rewritten by the next replay
  }

  // Captures one step. The layers replace the state tensors with new ones; the captured step
  // copies each back into the tensor it started from, so the replays read and write fixed buffers.
  void capture() {
    std::vector<Tensor*> slots;
    for_each_state_tensor(state_, [&](Tensor& t, bool) { slots.push_back(&t); });
    std::vector<Tensor> fixed;
    for (Tensor* t : slots) fixed.push_back(*t);
    auto graph = std::make_unique<cuda::Graph>();  // on an error its destructor ends the capture
    graph->begin_capture();
    {
      graph_logits_ = forward_step();
      for (size_t i = 0; i < slots.size(); i++)
        if (fixed[i].defined() && slots[i]->raw() != fixed[i].raw()) {
          fixed[i].copy_(*slots[i]);
          *slots[i] = fixed[i];
        }
    }  // the step's temporaries are freed here, into the blocks the graph keeps
    graph->end_capture();
    graph_ = std::move(graph);
  }

  std::unique_ptr<cuda::Graph> graph_;
  Tensor graph_logits_;
#else
  Tensor run_step() { return forward_step(); }
#endif

  StatefulModel& model_;
  const ModelConfig& config_;
  Device device_;
  int64_t max_context_, prefill_tokens_, capacity_ = 0;
  [[maybe_unused]] bool use_graph_;  // read by the CUDA build's run_step only (CPU builds: no graph)
  bool bounded_ = false;  // a full-attention cache limits the context to max_context_
  ModelState state_;
  Tensor ids_, positions_;  // (B, 1), (B) I32 on the device: the step's inputs, at fixed addresses
  std::vector<int64_t> lengths_;
  int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(TrainableModel& model, int64_t max_context, bool cuda_graph,
                                      int64_t prefill_tokens) {
  auto* stateful = dynamic_cast<StatefulModel*>(&model);
  HLA_CHECK_INPUT(stateful, "decoder: the model is not a HybridLM made by make_model, so it has no decoding state");
  return std::make_unique<ModelDecoder>(*stateful, model.device(), max_context, cuda_graph, prefill_tokens);
}

DecodeMemory decode_memory(const ModelConfig& c, int64_t context, DType activation) {
  HLA_CHECK_INPUT(context >= 0, "decode_memory: context must be >= 0, got ", context);
  const int64_t act = static_cast<int64_t>(dtype_size(activation)), f32 = 4, D = c.hidden_size;
  const bool rwkv = c.mixer().block == BlockStyle::Rwkv6;
  const StateShape s = state_shape(c);
  DecodeMemory m;
  for (int i = 0; i < c.num_hidden_layers; i++) {
    if (rwkv) m.state_bytes += D * act;  // the channel mix's token shift, in every block
    if (c.is_attention_layer(i)) {
      const int64_t d = D / c.attn_heads();
      const int64_t slots = c.attn.window_size > 0 ? std::min<int64_t>(context, c.attn.window_size) : context;
      m.kv_bytes += 2 * c.attn_kv_heads() * d * slots * act;  // K and V
      continue;
    }
    if (c.mixer().family == MixerFamily::Hgrn) m.state_bytes += D * f32;
    else m.state_bytes += s.v_heads * s.dk * s.dv * f32;
    if (c.uses_short_conv()) m.state_bytes += (2 * s.qk_heads * s.dk + s.v_heads * s.dv) * (c.conv_size - 1) * act;
    if (rwkv) m.state_bytes += D * act;  // the time mix's token shift
  }
  return m;
}

}  // namespace hla
