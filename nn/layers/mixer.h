// The sequence-mixer interface every layer implements, and make_mixer, which picks one from the
// mixer table (mixers.h) by model_type. A mixer maps (B, T, D) -> (B, T, D); it may also expose
// what cross-layer routing needs: its values (CLVR) and its delta-rule write residual (CLER,
// CLER-H), and take a routed residual into its values (CLER). Routing itself is the model's:
// MixerIO is all a layer sees of it.
#pragma once
#include <memory>

#include "nn/config.h"
#include "nn/layers/layer_state.h"
#include "nn/layers/params.h"

namespace hla {

struct MixerIO {
  Var lower_bound;   // in (HGRN, HGRN-2): this layer's forget-gate lower bound lb, (D), from model.lower_bounds
  Var routed_error;  // in (CLER): gamma * r of the nearest lower routing layer, added to v, (B, T, value_width)
  Var values;        // out (CLVR): v after conv + SiLU, flattened over heads, (B, T, value_width)
  Var error;         // out (CLER, CLER-H): write residual beta * (v - S'^T k), (B, T, value_width)
  bool want_values = false;
  bool want_error = false;
  LayerState* state = nullptr;  // in/out (decoding): the state the layer starts from and leaves; null in training
  // in ([train] delta_rule_keep): the GPU chunked kernels' forward keeps its chunk-start states for the
  // backward (DeltaRuleOptions::keep_states; decay_attention's and rwkv6's keep_states)
  bool keep_chunk_states = true;
  // in (packed documents, TrainableModel::takes_documents): attention masks every key before the
  // query's document and RoPE rotates by the place in it; every recurrence, short conv and token
  // shift starts each document from zero; doc_start undefined: rows are whole sequences. Held by
  // value: a recomputed part runs again in the backward (the copies share doc_start's chunk
  // layouts, built once per batch).
  Documents documents;
};

class Mixer {
 public:
  virtual ~Mixer() = default;
  virtual Var forward(const Var& x, MixerIO& io) = 0;  // x: (B, T, D) -> (B, T, D)
  virtual int64_t value_width() const { return 0; }    // HV * dv: the width of values and error
};

// Builds layer `layer`'s mixer for config (softmax attention for attention layers); its
// parameters are created in `store` under the current scope ("model.layers.{i}.attn.").
std::unique_ptr<Mixer> make_mixer(const ModelConfig& config, int layer, ParamStore& store);

}  // namespace hla
