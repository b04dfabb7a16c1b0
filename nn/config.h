// ModelConfig: the fla-style config.json of a hybrid model, and the hybrid pattern rule.
//
// Every field is listed once, in ModelConfig::visit_fields: its config.json name, help and
// valid range. That list drives from_json, to_json, validate, the `hla train` flags
// (--model.X), the run file's [model] keys and the start-up table, so a new field is one line
// there (plus the member it names). What a field means for each mixer (which mixers use the
// short convolutions, the state size, grouped value heads...) is a column of the mixer table,
// nn/layers/mixers.cpp.
//
// hybrid = "pure" | "r:1" | "transformer" expands to attn.layers by the project default
// (papers.md section 1, reading B): 0-indexed layer i is attention when (i + 1) % r == 0,
// so 24 layers at 6:1 give [5, 11, 17, 23]. An explicit attn.layers list wins; config.json
// always stores the explicit list.
#pragma once
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace hla {

struct MixerSpec;  // a row of the mixer table (nn/layers/mixers.h)

// Cross-layer routing (papers.md 3.5). The model owns it; a layer only sees MixerIO.
enum class Routing { None, Clvr, Cler, ClerH };
const char* routing_name(Routing r);  // "none" | "clvr" | "cler" | "cler_h"
// Parses a routing name; an error starts with `where` ("c.json: routing") and lists the choices.
Routing parse_routing(const std::string& text, const std::string& where);
inline void to_json(nlohmann::json& j, Routing r) { j = routing_name(r); }
std::ostream& operator<<(std::ostream& os, Routing r);

struct ModelConfig;

// The condition of the Mamba-2 init fields: validate() rejects a value other than the default
// for any other mixer, whose gates start as fla's layers fix them.
inline constexpr char kMamba2Only[] = "for mamba2";

// One entry of the field list: the config.json name, a help line, and the range validate()
// checks. Built in place: ModelField("conv_size", "...").at_least(1).when(...).
struct ModelField {
  const char* name;      // config.json key (inside the "attn" block when in_attn)
  const char* help;
  bool in_attn = false;  // lives in config.json's "attn" block; [model] key "attn_<name>"
  double min = -std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
  double max = std::numeric_limits<double>::infinity();
  const char* max_reason = "";  // why the cap: "far above any published model"
  bool (ModelConfig::*applies)() const = nullptr;  // the range holds only where this says so
  const char* applies_text = "";                   // "with short convolutions"
  int (ModelConfig::*zero_means)() const = nullptr;  // config.json writes this value for 0
  bool zero_is_null = false;                         // config.json writes null for 0 (fla's "off")

  ModelField(const char* name_, const char* help_) : name(name_), help(help_) {}
  ModelField& attn() { in_attn = true; return *this; }
  ModelField& at_least(double v) { min = v; return *this; }
  ModelField& above(double v) { min = v; min_exclusive = true; return *this; }
  ModelField& at_most(double v, const char* reason) {
    max = v;
    max_reason = reason;
    return *this;
  }
  ModelField& when(bool (ModelConfig::*test)() const, const char* text) {
    applies = test;
    applies_text = text;
    return *this;
  }
  ModelField& written_as(int (ModelConfig::*resolved)() const) { zero_means = resolved; return *this; }
  ModelField& null_for_zero() { zero_is_null = true; return *this; }

  std::string key() const;   // [model] key and --model.<key> flag: name, or attn_<name>
  std::string path() const;  // in config.json and in errors: name, or attn.<name>
};

struct AttnConfig {
  std::vector<int> layers;  // 0-based layer indices that use softmax attention
  int num_heads = 0;        // 0: same as the model's num_heads
  int num_kv_heads = 0;     // 0: same as num_heads
  double rope_theta = 10000.0;
  int window_size = 0;  // 0: full causal
};

// The sanity caps on a model's size, checked from the config before anything is allocated.
constexpr int kMaxLayers = 1024;                      // Llama-3 405B has 126
constexpr int64_t kMaxParameters = int64_t{1} << 34;  // 64 GiB of fp32 weights

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
  int n_groups = 1;     // Mamba-2: groups of B and C, each read by (d_inner / head_dim) / n_groups heads
  int chunk_size = 64;  // chunk length of the chunked recurrence kernels (0: token recurrence)
  bool use_short_conv = true;
  bool norm_before_gate = false;  // Mamba-2: RMSNorm before the z gate (fla's norm_before_gate)
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;
  // Mamba-2's initialisation, fla's Mamba2Config fields (nn/layers/common.h has the rules). The
  // other mixers' gates start as fla's layers fix them, so these must keep their defaults there.
  std::vector<double> a_init_range = {1.0, 16.0};  // A_log = ln A, A ~ U(lo, hi)
  double dt_min = 0.001, dt_max = 0.1;             // dt_bias: dt ~ exp U(ln dt_min, ln dt_max) ...
  double dt_init_floor = 1e-4;                     // ... clamped >= dt_init_floor
  double conv_init = 0;                            // > 0: conv1d.weight ~ U(-conv_init, conv_init); 0: normal
  bool rescale_residual = true;                    // out_proj: kaiming_uniform / sqrt(L); false: normal
  Routing routing = Routing::None;
  AttnConfig attn;
  bool has_attn = false;  // whether an attn block is present (hybrid or transformer)
  // The fla fields of config.json that do not change hla's math (nn/fla_config.cpp), as read;
  // written back unchanged, so fla -> hla -> fla keeps them.
  nlohmann::json fla_kept = nlohmann::json::object();

  // The field list. Calls f(field, member...) for every field in table order, with that
  // member of each config given: one config to read or write it, two to copy between them.
  template <class F, class... C>
  static void visit_fields(F&& f, C&... c) {
    using Field = ModelField;
    f(Field("model_type", "mixer of the linear layers (fla model_type, nn/layers/mixers.cpp)"), c.model_type...);
    f(Field("hidden_size", "model width").at_least(1), c.hidden_size...);
    f(Field("num_hidden_layers", "layers").at_least(1).at_most(kMaxLayers, "far above any published model"),
      c.num_hidden_layers...);
    f(Field("num_heads", "heads of the linear mixer").at_least(1), c.num_heads...);
    f(Field("num_v_heads", "value heads (0 = num_heads)").at_least(0).written_as(&ModelConfig::value_heads),
      c.num_v_heads...);
    f(Field("head_dim", "key head width (0 = hidden_size / num_heads)").at_least(0).written_as(&ModelConfig::key_head_dim),
      c.head_dim...);
    f(Field("expand_v", "value expansion").above(0), c.expand_v...);
    f(Field("expand_k", "key expansion").above(0), c.expand_k...);
    f(Field("intermediate_size", "MLP width (0 = GatedMLP rule)").at_least(0).written_as(&ModelConfig::mlp_intermediate_size),
      c.intermediate_size...);
    f(Field("hidden_ratio", "MLP ratio for the GatedMLP rule").above(0), c.hidden_ratio...);
    f(Field("vocab_size", "vocabulary (hla train: 0 = the data's)").at_least(1), c.vocab_size...);
    f(Field("norm_eps", "RMSNorm epsilon").above(0), c.norm_eps...);
    f(Field("conv_size", "short convolution width").at_least(1).when(&ModelConfig::uses_short_conv, "with short convolutions"),
      c.conv_size...);
    f(Field("state_size", "Mamba-2 state width N").at_least(1).when(&ModelConfig::uses_state_size, "for mamba2"),
      c.state_size...);
    f(Field("n_groups", "Mamba-2 groups of B and C").at_least(1).when(&ModelConfig::uses_state_size, "for mamba2"),
      c.n_groups...);
    f(Field("chunk_size", "chunk length of the chunked kernels (0 = token recurrence)").at_least(0), c.chunk_size...);
    f(Field("use_short_conv", "short convolutions on q, k, v"), c.use_short_conv...);
    f(Field("norm_before_gate", "Mamba-2: RMSNorm before the z gate"), c.norm_before_gate...);
    f(Field("tie_word_embeddings", "lm_head shares the embedding"), c.tie_word_embeddings...);
    f(Field("initializer_range", "init std").above(0), c.initializer_range...);
    f(Field("A_init_range", "Mamba-2 init: A ~ U(lo, hi), [lo, hi]").when(&ModelConfig::uses_mamba2_init, kMamba2Only),
      c.a_init_range...);
    f(Field("dt_min", "Mamba-2 init: dt ~ exp U(ln dt_min, ln dt_max)").above(0).when(&ModelConfig::uses_mamba2_init, kMamba2Only),
      c.dt_min...);
    f(Field("dt_max", "Mamba-2 init: dt's upper end").above(0).when(&ModelConfig::uses_mamba2_init, kMamba2Only),
      c.dt_max...);
    f(Field("dt_init_floor", "Mamba-2 init: dt >= dt_init_floor").above(0).when(&ModelConfig::uses_mamba2_init, kMamba2Only),
      c.dt_init_floor...);
    f(Field("conv_init", "Mamba-2 init: conv1d ~ U(-conv_init, conv_init) (0 = N(0, initializer_range))").at_least(0)
          .when(&ModelConfig::uses_mamba2_init, kMamba2Only),
      c.conv_init...);
    f(Field("rescale_residual", "Mamba-2 init: out_proj kaiming_uniform / sqrt(layers) (fla's rescale_prenorm_residual; "
                                "false = N(0, initializer_range))")
          .when(&ModelConfig::uses_mamba2_init, kMamba2Only),
      c.rescale_residual...);
    f(Field("routing", "cross-layer routing: none | clvr | cler | cler_h"), c.routing...);
    f(Field("layers", "explicit attention layer indices (overrides hybrid)").attn(), c.attn.layers...);
    f(Field("num_heads", "attention heads (0 = num_heads)").attn().at_least(0).written_as(&ModelConfig::attn_heads),
      c.attn.num_heads...);
    f(Field("num_kv_heads", "attention kv heads (0 = attn heads)").attn().at_least(0).written_as(&ModelConfig::attn_kv_heads),
      c.attn.num_kv_heads...);
    f(Field("rope_theta", "RoPE base").attn().above(0), c.attn.rope_theta...);
    f(Field("window_size", "sliding window (0 = full causal)").attn().at_least(0).null_for_zero(), c.attn.window_size...);
  }

  // Parses config.json content, fla's (nn/fla_config.h) or hla's own (the field list above), and
  // validates it; `source` (a file name) goes into every error.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  // The same without validate(), for a file that run settings override before the result is
  // checked; the fields the file leaves out keep their values in `defaults`.
  static ModelConfig parse_json(const nlohmann::json& j, const std::string& source,
                                const ModelConfig& defaults);
  nlohmann::json to_json() const;  // fla's config.json (fla_config_json)
  static ModelConfig load(const std::string& path);
  void save(const std::string& path) const;

  // Applies the shorthand ("pure", "24:1", "12:1", "6:1", "3:1", "transformer").
  void set_hybrid(const std::string& hybrid);
  bool is_attention_layer(int i) const;
  std::string pattern() const;  // e.g. "LLLLLA LLLLLA" (groups of 6 when the ratio is regular)

  // The mixer table's row for model_type (an error lists the table's names).
  const MixerSpec& mixer() const;
  // The fields whose 0 means "derived": what the layers and config.json use.
  int key_head_dim() const;
  int value_heads() const;
  int mlp_intermediate_size() const;
  int attn_heads() const;
  int attn_kv_heads() const;
  // Where the mixer reads a field (the `when` of a range).
  bool uses_short_conv() const;
  bool uses_state_size() const;
  bool uses_mamba2_init() const;  // the Mamba-2 init fields (A_init_range ... rescale_residual)

  // A lower bound on the parameter count, from the widths alone (nothing is built): the
  // embedding and lm_head; per linear layer the projections to its keys and values and back
  // (hidden_size * (key width + 2 value widths): every mixer of the table has at least these),
  // its short convolution over the values and Mamba-2's B and C projections; per attention
  // layer q_proj and o_proj; per block its MLP. Saturates at int64's maximum, never wraps.
  int64_t min_parameter_count() const;

  // Every field's range, then the rules between fields, then the size cap (kMaxParameters);
  // errors name source, field and value.
  void validate(const std::string& source) const;
};

// One setting read from JSON (config.json, or a run file read into JSON). The value must have
// the setting's type exactly: an integer within the C++ type's range (no fractions, no
// booleans), a finite number, true or false, a string, a list of integers or of finite numbers. Errors read
// "<source>: <field> must be ..., got <excerpt of the value>".
void read_setting(const nlohmann::json& v, bool& out, const std::string& source, const std::string& field);
void read_setting(const nlohmann::json& v, int& out, const std::string& source, const std::string& field);
void read_setting(const nlohmann::json& v, int64_t& out, const std::string& source, const std::string& field);
void read_setting(const nlohmann::json& v, uint64_t& out, const std::string& source, const std::string& field);
void read_setting(const nlohmann::json& v, double& out, const std::string& source, const std::string& field);
void read_setting(const nlohmann::json& v, std::string& out, const std::string& source, const std::string& field);
void read_setting(const nlohmann::json& v, Routing& out, const std::string& source, const std::string& field);
void read_setting(const nlohmann::json& v, std::vector<int>& out, const std::string& source, const std::string& field);
void read_setting(const nlohmann::json& v, std::vector<double>& out, const std::string& source, const std::string& field);

// Reads an attn block {layers, num_heads, num_kv_heads, qkv_bias, window_size, rope_theta}
// into c (has_attn = true); errors name source and the field ("attn.num_heads").
void read_attn_block(const nlohmann::json& block, ModelConfig& c, const std::string& source);

// Layer indices for "r:1" with L layers under the project default rule.
std::vector<int> hybrid_attention_layers(int num_layers, const std::string& hybrid);

}  // namespace hla
