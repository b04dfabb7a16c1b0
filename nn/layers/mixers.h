// The table of mixers: one row per fla model_type with everything the model, the config checks
// and make_mixer ask about a mixer (its family, layer factory, block style, how it shapes its
// heads, which config fields it reads, which routings it can serve). A question about a mixer
// is a column here, never a `model_type ==` test elsewhere. The rows are in mixers.cpp; the
// layer constructors below are one file each in nn/layers/ and create their parameters under
// the caller's scope ("model.layers.{i}.attn.").
#pragma once
#include <string>
#include <vector>

#include "nn/layers/mixer.h"

namespace hla {

// The kernel family (ARCHITECTURE.md 6). Attention: every layer is softmax attention.
enum class MixerFamily { Attention, Hgrn, DecayAttention, Rwkv6, DeltaRule };

// The block around the mixer (mixers.md 3.1, 3.4):
//   Standard: "model." ; RMSNorm attn_norm -> mixer "attn." ; RMSNorm mlp_norm -> GatedMLP "mlp."
//   Mamba2:   "backbone." ; RMSNorm norm -> mixer "mixer." ; no MLP ; final norm "norm_f"
//   Rwkv6:    LayerNorms with bias, pre_norm on layer 0 ; ffn_norm -> channel mix "ffn."
enum class BlockStyle { Standard, Mamba2, Rwkv6 };

// How the mixer's heads come from the config (what validate() checks divide):
//   None:     no heads (HGRN's channels; the Transformer has only attention layers)
//   HeadDim:  dk = head_dim (or hidden_size / num_heads), dv = dk * expand_v
//   Expand:   dk = hidden_size * expand_k / num_heads, dv = hidden_size * expand_v / num_heads
//   Split:    dk = dv = hidden_size / num_heads
//   InnerByP: Mamba-2, heads = hidden_size * expand_v / P with P = head_dim (num_heads unused)
enum class HeadShape { None, HeadDim, Expand, Split, InnerByP };

// num_v_heads: Unused, SameAsHeads (must equal num_heads), Grouped (a multiple of num_heads).
enum class ValueHeads { Unused, SameAsHeads, Grouped };

// Short convolutions (conv_size): None, Optional (on with use_short_conv), Always.
enum class ShortConv { None, Optional, Always };

using MixerFactory = std::unique_ptr<Mixer> (*)(const ModelConfig& c, ParamStore& store);

struct MixerSpec {
  const char* model_type;
  MixerFamily family;
  MixerFactory make;  // the mixer of a linear layer (softmax attention for the Transformer)
  BlockStyle block;
  HeadShape heads;
  ValueHeads value_heads;
  ShortConv short_conv;
  bool state_size;     // reads state_size (Mamba-2's N)
  bool lower_bounds;   // forget-gate lower bounds per layer, model.lower_bounds (HGRN, HGRN-2)
  bool routes_values;  // CLVR: the layer exposes its values (MixerIO::values)
  bool routes_error;   // CLER, CLER-H: the layer exposes its delta-rule write residual

  bool serves(Routing r) const;
};

const std::vector<MixerSpec>& mixer_table();
// The row for model_type; an unknown one is an error starting with `source` that lists the table.
const MixerSpec& find_mixer(const std::string& model_type, const std::string& source);

std::unique_ptr<Mixer> make_attention_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_hgrn_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_retnet_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_gla_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_hgrn2_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_mamba2_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_rwkv6_layer(const ModelConfig& c, ParamStore& store);
// DeltaNet, Gated DeltaNet, KDA and GDN-2 share one layer (delta_layer.cpp) with per-mixer gates.
std::unique_ptr<Mixer> make_delta_net_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_gated_deltanet_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_kda_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_gdn2_layer(const ModelConfig& c, ParamStore& store);

}  // namespace hla
