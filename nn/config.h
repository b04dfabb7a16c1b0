// ModelConfig: the fla-style config.json of a hybrid model, and the hybrid pattern rule.
//
// hybrid = "pure" | "r:1" | "transformer" expands to attn.layers by the project default
// (papers.md section 1, reading B): 0-indexed layer i is attention when (i + 1) % r == 0,
// so 24 layers at 6:1 give [5, 11, 17, 23]. An explicit attn.layers list wins; config.json
// always stores the explicit list.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hla {

// The eleven mixers, by fla model_type.
extern const std::vector<std::string> kMixerTypes;  // "transformer", "hgrn", "retnet", "gla",
                                                    // "hgrn2", "mamba2", "rwkv6", "delta_net",
                                                    // "gated_deltanet", "kda", "gdn2"

struct AttnConfig {
  std::vector<int> layers;  // 0-based layer indices that use softmax attention
  int num_heads = 0;        // 0: same as the model's num_heads
  int num_kv_heads = 0;     // 0: same as num_heads
  double rope_theta = 10000.0;
  int window_size = 0;  // 0: full causal
};

struct ModelConfig {
  std::string model_type = "gated_deltanet";
  int hidden_size = 256;
  int num_hidden_layers = 4;
  int num_heads = 4;
  int num_v_heads = 0;  // 0: num_heads (grouped value heads where the mixer supports them)
  int head_dim = 0;     // 0: hidden_size / num_heads (key head dim for linear mixers)
  double expand_v = 1.0;
  double expand_k = 1.0;
  int intermediate_size = 0;  // 0: the GatedMLP rule of mixers.md 2.8
  double hidden_ratio = 4.0;
  int vocab_size = 258;
  double norm_eps = 1e-6;
  int conv_size = 4;
  int state_size = 64;  // Mamba-2 N (the SSM state width, dk of its decay attention)
  int chunk_size = 64;  // chunk length of the chunked recurrence kernels (0: token recurrence)
  bool use_short_conv = true;
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;
  std::string routing = "none";  // none | clvr | cler | cler_h
  AttnConfig attn;
  bool has_attn = false;  // whether an attn block is present (hybrid or transformer)

  // Parses config.json content; `source` (a file name) goes into every error.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  nlohmann::json to_json() const;
  static ModelConfig load(const std::string& path);
  void save(const std::string& path) const;

  // Applies the shorthand ("pure", "24:1", "12:1", "6:1", "3:1", "transformer").
  void set_hybrid(const std::string& hybrid);
  bool is_attention_layer(int i) const;
  std::string pattern() const;  // e.g. "LLLLLA LLLLLA" (groups of 6 when the ratio is regular)
  int key_head_dim() const;
  int mlp_intermediate_size() const;
  void validate(const std::string& source) const;
};

// Layer indices for "r:1" with L layers under the project default rule.
std::vector<int> hybrid_attention_layers(int num_layers, const std::string& hybrid);

}  // namespace hla
