// The one table of fla's config fields and what each means in hla (see fla_config.h), with
// the reader and writer that follow it.
#include "nn/fla_config.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "nn/layers/mixers.h"
#include "tensor/error.h"
#include "tensor/json.h"

namespace hla {
namespace {

using json = nlohmann::json;

// One bit per fla model_type, in the mixer table's order.
const char* const kTypeNames[] = {"transformer", "hgrn", "retnet", "gla", "hgrn2", "mamba2",
                                  "rwkv6", "delta_net", "gated_deltanet", "kda", "gdn2"};
enum : unsigned {
  kTransformer = 1u << 0, kHgrn = 1u << 1, kRetnet = 1u << 2, kGla = 1u << 3, kHgrn2 = 1u << 4, kMamba2 = 1u << 5,
  kRwkv6 = 1u << 6, kDeltaNet = 1u << 7, kGdn = 1u << 8, kKda = 1u << 9, kGdn2 = 1u << 10,
  kAll = (1u << 11) - 1,
  kStandard = kAll & ~kMamba2,                       // embeddings, blocks with an MLP, model.*
  kGatedMlp = kStandard & ~kRwkv6,                   // GatedMLP (swish) blocks
  kHybrid = kAll & ~(kTransformer | kMamba2),        // configs with an `attn` block
  kNoShortConv = kHgrn | kGla | kHgrn2,              // fla's layer has short convolutions, hla's has none
  kAffineFlag = kHgrn | kRetnet | kGla | kHgrn2,     // elementwise_affine reaches the mixer's norm
  kDeltaRule = kDeltaNet | kGdn | kKda | kGdn2,
  kExpandKv = kRetnet | kGla | kRwkv6,               // dk = D expand_k / H, dv = D expand_v / H
};

// The bit of a model_type (0 for an unknown one).
unsigned type_bit(const std::string& model_type) {
  for (unsigned i = 0; i < sizeof(kTypeNames) / sizeof(kTypeNames[0]); i++)
    if (model_type == kTypeNames[i]) return 1u << i;
  return 0;
}

// fla's causal-LM class per model_type (written as "architectures"); gdn2 has none.
const char* fla_class(unsigned bit) {
  switch (bit) {
    case kTransformer: return "TransformerForCausalLM";
    case kHgrn: return "HGRNForCausalLM";
    case kRetnet: return "RetNetForCausalLM";
    case kGla: return "GLAForCausalLM";
    case kHgrn2: return "HGRN2ForCausalLM";
    case kMamba2: return "Mamba2ForCausalLM";
    case kRwkv6: return "RWKV6ForCausalLM";
    case kDeltaNet: return "DeltaNetForCausalLM";
    case kGdn: return "GatedDeltaNetForCausalLM";
    case kKda: return "KDAForCausalLM";
    default: return nullptr;
  }
}

// What a field of the file is to the reader of a row: its value, the whole file (for the
// fields whose meaning depends on another), the config being filled.
struct FlaRead {
  const json& value;
  const json& file;
  ModelConfig& c;
  const std::string& source;
  const std::string& field;
};
using ReadFn = void (*)(const FlaRead&);
using WriteFn = json (*)(const ModelConfig&);  // a discarded value: the field is not written

enum class Use { Honoured, Ignored, Fixed };

struct FlaField {
  const char* name;
  unsigned types;
  Use use;
  const char* meaning;      // in hla
  json value;               // Fixed: the value hla implements; Ignored: fla's default
  const char* hla_field;    // Honoured: the ModelConfig field (config.h's path, "attn.rope_theta")
  bool null_for_zero;       // Honoured: fla's null is hla's 0 ("derived")
  ReadFn read;              // a conversion, where the field is not one ModelConfig field
  WriteFn write;            // the same for writing; for Ignored: replaces fla's default
  bool keep_only;           // Ignored: written only when the file had it
};

FlaField honoured(const char* name, unsigned types, const char* hla_field, const char* meaning) {
  return {name, types, Use::Honoured, meaning, json(), hla_field, false, nullptr, nullptr, false};
}
FlaField honoured_or_null(const char* name, unsigned types, const char* hla_field, const char* meaning) {
  return {name, types, Use::Honoured, meaning, json(), hla_field, true, nullptr, nullptr, false};
}
FlaField converted(const char* name, unsigned types, ReadFn read, WriteFn write, const char* meaning) {
  return {name, types, Use::Honoured, meaning, json(), nullptr, false, read, write, false};
}
FlaField ignored(const char* name, unsigned types, json fla_default, const char* meaning) {
  return {name, types, Use::Ignored, meaning, std::move(fla_default), nullptr, false, nullptr, nullptr, false};
}
FlaField kept(const char* name, unsigned types, const char* meaning, WriteFn write = nullptr) {
  return {name, types, Use::Ignored, meaning, json(), nullptr, false, nullptr, write, true};
}
FlaField fixed(const char* name, unsigned types, json value, const char* meaning) {
  return {name, types, Use::Fixed, meaning, std::move(value), nullptr, false, nullptr, nullptr, false};
}

json omitted() { return json(json::value_t::discarded); }

// A number from the file (an error names the field), or `otherwise` for null / absent.
double number_or(const json& file, const char* field, double otherwise, const std::string& source) {
  if (!file.contains(field) || file[field].is_null()) return otherwise;
  double v = 0;
  read_setting(file[field], v, source, field);
  return v;
}

// Writes a double that holds a whole number as an integer (fla's int fields).
json whole_if_integral(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e15) return static_cast<int64_t>(v);
  return v;
}

// --- conversions: fla fields whose hla meaning is not one ModelConfig field -------------------

// Transformer: num_heads is the attention layers' head count.
void read_transformer_heads(const FlaRead& r) {
  read_setting(r.value, r.c.num_heads, r.source, r.field);
  r.c.attn.num_heads = 0;
}
json write_transformer_heads(const ModelConfig& c) { return c.attn_heads(); }

// hidden_ratio: fla's GatedMLP takes 4 for null.
void read_hidden_ratio(const FlaRead& r) {
  r.c.hidden_ratio = r.value.is_null() ? 4.0 : number_or(r.file, "hidden_ratio", 4.0, r.source);
}
json write_hidden_ratio(const ModelConfig& c) { return c.hidden_ratio; }

// RWKV-6's channel mix is 32 * ceil(D * hidden_ratio / 32) wide unless intermediate_size is
// given; hla's is that rule at fla's hidden_ratio 3.5 only.
void read_rwkv6_hidden_ratio(const FlaRead& r) {
  const double ratio = number_or(r.file, "hidden_ratio", 3.5, r.source);
  const bool width_given = r.file.contains("intermediate_size") && !r.file["intermediate_size"].is_null();
  HLA_CHECK_INPUT(width_given || ratio == 3.5, r.source, ": hidden_ratio is ", ratio,
                  " with intermediate_size null; hla's rwkv6 channel mix has fla's default width "
                  "32 * ceil(3.5 * hidden_size / 32), so it supports hidden_ratio 3.5 (or give intermediate_size)");
  r.c.hidden_ratio = ratio;
}
json write_rwkv6_hidden_ratio(const ModelConfig& c) { return c.intermediate_size == 0 ? 3.5 : c.hidden_ratio; }

// HGRN-2: fla takes num_heads = hidden_size / expand_ratio when expand_ratio is set.
void read_hgrn2_heads(const FlaRead& r) {
  if (!r.value.is_null()) read_setting(r.value, r.c.num_heads, r.source, r.field);
}
json write_hgrn2_heads(const ModelConfig& c) { return c.num_heads; }
void read_hgrn2_expand_ratio(const FlaRead& r) {
  const bool heads_given = r.file.contains("num_heads") && !r.file["num_heads"].is_null();
  if (r.value.is_null()) {
    HLA_CHECK_INPUT(heads_given, r.source, ": expand_ratio and num_heads are both null; fla's hgrn2 needs one");
    return;
  }
  int ratio = 0;
  read_setting(r.value, ratio, r.source, r.field);
  HLA_CHECK_INPUT(ratio >= 1 && r.c.hidden_size % ratio == 0, r.source, ": expand_ratio ", ratio,
                  " does not divide hidden_size ", r.c.hidden_size, " (fla's hgrn2 has hidden_size / expand_ratio heads)");
  const int heads = r.c.hidden_size / ratio;
  HLA_CHECK_INPUT(!heads_given || r.c.num_heads == heads, r.source, ": num_heads ", r.c.num_heads,
                  " contradicts expand_ratio ", ratio, ": fla's hgrn2 takes num_heads = hidden_size / expand_ratio = ",
                  heads);
  r.c.num_heads = heads;
}
json write_hgrn2_expand_ratio(const ModelConfig& c) { return c.hidden_size / c.num_heads; }

// DeltaNet: fla's widths are dk = D expand_k / H, dv = D expand_v / H; hla's are dk = head_dim,
// dv = head_dim * expand_v.
void read_delta_net_expand_k(const FlaRead& r) {
  const double expand_k = number_or(r.file, "expand_k", 1.0, r.source);
  const double width = r.c.hidden_size * expand_k;
  HLA_CHECK_INPUT(expand_k > 0 && std::floor(width) == width && static_cast<int64_t>(width) % r.c.num_heads == 0,
                  r.source, ": expand_k ", expand_k, " gives a key width hidden_size * expand_k = ", width,
                  " that num_heads ", r.c.num_heads, " does not split into whole heads");
  r.c.head_dim = static_cast<int>(static_cast<int64_t>(width) / r.c.num_heads);
}
double delta_net_expand_k(const ModelConfig& c) {
  return static_cast<double>(c.key_head_dim()) * c.num_heads / c.hidden_size;
}
json write_delta_net_expand_k(const ModelConfig& c) { return delta_net_expand_k(c); }
void read_delta_net_expand_v(const FlaRead& r) {
  r.c.expand_v = number_or(r.file, "expand_v", 1.0, r.source) / number_or(r.file, "expand_k", 1.0, r.source);
}
json write_delta_net_expand_v(const ModelConfig& c) { return c.expand_v * delta_net_expand_k(c); }

// Mamba-2: expand is the d_inner factor (hla's expand_v); num_heads is fla's derived
// expand * hidden_size / head_dim, written for information and checked when read.
void read_mamba2_expand(const FlaRead& r) { read_setting(r.value, r.c.expand_v, r.source, r.field); }
json write_mamba2_expand(const ModelConfig& c) { return whole_if_integral(c.expand_v); }
int64_t mamba2_heads(const ModelConfig& c) {
  return static_cast<int64_t>(c.expand_v * c.hidden_size) / c.key_head_dim();
}
void read_mamba2_heads(const FlaRead& r) {
  if (r.value.is_null()) return;
  read_setting(r.value, r.c.num_heads, r.source, r.field);
  if (!r.file.contains("head_dim")) return;  // not fla's file: hla's head_dim rule (hidden_size / num_heads)
  HLA_CHECK_INPUT(r.c.num_heads == mamba2_heads(r.c), r.source, ": num_heads ", r.c.num_heads, " contradicts expand ",
                  r.c.expand_v, " * hidden_size ", r.c.hidden_size, " / head_dim ", r.c.key_head_dim(), " = ",
                  mamba2_heads(r.c));
}
json write_mamba2_heads(const ModelConfig& c) { return mamba2_heads(c); }

// Mamba-2's A_init_range: a pair of numbers, fla writes its default (1, 16) as integers.
void read_a_init_range(const FlaRead& r) { read_setting(r.value, r.c.a_init_range, r.source, r.field); }
json write_a_init_range(const ModelConfig& c) {
  json pair = json::array();
  for (double v : c.a_init_range) pair.push_back(whole_if_integral(v));
  return pair;
}

// Mamba-2's conv_init: fla's null (no own init: N(0, initializer_range)) is hla's 0; fla's 0
// would zero the weights (U(0, 0)), which hla does not implement.
void read_conv_init(const FlaRead& r) {
  if (r.value.is_null()) {
    r.c.conv_init = 0;
    return;
  }
  read_setting(r.value, r.c.conv_init, r.source, r.field);
  HLA_CHECK_INPUT(r.c.conv_init != 0, r.source, ": conv_init is 0, which gives fla's conv1d.weight U(0, 0) = 0; hla "
                  "supports null (N(0, initializer_range)) or a bound > 0 (U(-conv_init, conv_init))");
}
json write_conv_init(const ModelConfig& c) { return c.conv_init == 0 ? json(nullptr) : json(c.conv_init); }

// "architectures": fla's class for the model_type.
json write_architectures(const ModelConfig& c) {
  const char* cls = fla_class(type_bit(c.model_type));
  if (!cls) return omitted();
  return json::array({cls});
}

// The weights hla writes are fp32: a dtype field says so (torch_dtype in 4.x, dtype in 5.x).
json write_torch_dtype(const ModelConfig& c) {
  if (c.fla_kept.contains("dtype") && !c.fla_kept.contains("torch_dtype")) return omitted();
  return "float32";
}
json write_dtype(const ModelConfig& c) { return c.fla_kept.contains("dtype") ? json("float32") : omitted(); }

void read_attn(const FlaRead& r);
json write_attn(const ModelConfig& c);
json write_mamba2_attn(const ModelConfig& c);
void read_hla_block(const FlaRead& r);
json write_hla_block(const ModelConfig& c);

// clang-format off
// The table. Rows are read in this order, so a field read in terms of others (expand_ratio,
// expand_k, num_heads of Mamba-2) comes after them; a name may have one row per group of types.
const std::vector<FlaField>& fla_fields() {
  static const std::vector<FlaField> table = {
    // shape of every model
    honoured("hidden_size", kAll, "hidden_size", "model width"),
    honoured("num_hidden_layers", kAll, "num_hidden_layers", "layers"),
    honoured("vocab_size", kAll, "vocab_size", "vocabulary"),
    honoured("norm_eps", kAll, "norm_eps", "epsilon of every RMSNorm / LayerNorm"),
    honoured("tie_word_embeddings", kAll, "tie_word_embeddings", "lm_head shares the embedding"),
    honoured("initializer_range", kAll, "initializer_range", "init std (initialisation only)"),
    converted("hidden_ratio", kGatedMlp, read_hidden_ratio, write_hidden_ratio, "GatedMLP width rule (null = 4)"),
    honoured_or_null("intermediate_size", kStandard, "intermediate_size", "MLP width (null = the hidden_ratio rule)"),
    converted("hidden_ratio", kRwkv6, read_rwkv6_hidden_ratio, write_rwkv6_hidden_ratio,
              "channel-mix width rule: hla has fla's default 3.5 (any value when intermediate_size is given)"),
    fixed("hidden_act", kGatedMlp, "swish", "the MLP (and GLA/RetNet output gate) activation"),
    fixed("hidden_act", kRwkv6, "sqrelu", "the channel-mix activation"),
    fixed("hidden_act", kMamba2, "silu", "the convolution activation"),
    fixed("elementwise_affine", kAffineFlag, true, "the mixers' output norms have a weight"),
    ignored("elementwise_affine", kTransformer, true, "fla's Transformer block does not read it"),
    fixed("use_l2warp", kAll, false, "l2warp adds a logit penalty to the loss; hla's loss is plain cross-entropy"),
    fixed("attnres_block_size", kGatedMlp, nullptr, "attention residuals (extra res_proj / res_norm per block)"),
    converted("attn", kHybrid, read_attn, write_attn, "the softmax-attention layers of a hybrid (attn.*)"),
    converted("attn", kMamba2, read_attn, write_mamba2_attn,
              "the softmax-attention layers of a hybrid (fla has no Mamba-2 hybrid: its Mamba2Config has no attn)"),
    converted("hla", kAll, read_hla_block, write_hla_block, "hla's own settings: chunk_size, routing"),
    // Transformer: its attention settings are top-level fields
    converted("num_heads", kTransformer, read_transformer_heads, write_transformer_heads, "attention heads"),
    honoured_or_null("num_kv_heads", kTransformer, "attn.num_kv_heads", "key/value heads (null = num_heads)"),
    honoured_or_null("window_size", kTransformer, "attn.window_size", "sliding window (null = full causal)"),
    honoured("rope_theta", kTransformer, "attn.rope_theta", "RoPE base"),
    fixed("qkv_bias", kTransformer, false, "q/k/v projection biases"),
    fixed("qk_norm", kTransformer, false, "RMSNorm on q and k"),
    // linear mixers
    honoured("num_heads", kExpandKv | kDeltaRule, "num_heads", "heads of the linear mixer"),
    honoured("expand_k", kExpandKv, "expand_k", "key width = hidden_size * expand_k"),
    honoured("expand_v", kExpandKv | kGdn | kKda | kGdn2, "expand_v", "value width factor"),
    converted("expand_k", kDeltaNet, read_delta_net_expand_k, write_delta_net_expand_k,
              "key width = hidden_size * expand_k (hla: head_dim = that / num_heads)"),
    converted("expand_v", kDeltaNet, read_delta_net_expand_v, write_delta_net_expand_v,
              "value width = hidden_size * expand_v (hla: expand_v relative to head_dim)"),
    honoured("head_dim", kGdn | kKda | kGdn2, "head_dim", "key head width"),
    honoured_or_null("num_v_heads", kGdn | kKda, "num_v_heads", "value heads (null = num_heads)"),
    fixed("num_kv_heads", kRetnet | kGla, nullptr, "grouped key/value heads"),
    fixed("feature_map", kRetnet | kGla, nullptr, "a feature map on q and k"),
    fixed("use_output_gate", kRetnet | kGla, true, "the swish output gate"),
    fixed("clamp_min", kGla, nullptr, "a lower clamp on the log decay"),
    fixed("use_gk", kGla, true, "the per-key decay gate"),
    fixed("use_gv", kGla, false, "a per-value decay gate"),
    fixed("use_short_conv", kNoShortConv, false, "short convolutions (this layer has none in hla)"),
    ignored("conv_size", kNoShortConv, 4, "short-convolution width: unused without short convolutions"),
    ignored("use_short_conv", kRetnet, false, "fla's RetNet block does not pass it to its layer"),
    ignored("conv_size", kRetnet, 4, "fla's RetNet block does not pass it to its layer"),
    honoured("use_short_conv", kDeltaRule, "use_short_conv", "short convolutions on q, k, v"),
    honoured("conv_size", kDeltaRule, "conv_size", "short-convolution width"),
    fixed("expand_ratio", kHgrn, 1, "state width = hidden_size * expand_ratio (the lower bounds need 1)"),
    converted("num_heads", kHgrn2, read_hgrn2_heads, write_hgrn2_heads, "heads (null: hidden_size / expand_ratio)"),
    converted("expand_ratio", kHgrn2, read_hgrn2_expand_ratio, write_hgrn2_expand_ratio,
              "head width: num_heads = hidden_size / expand_ratio"),
    fixed("use_lower_bound", kHgrn | kHgrn2, true, "the per-layer forget-gate lower bounds (model.lower_bounds)"),
    fixed("proj_low_rank_dim", kRwkv6, 32, "rank of the token-shift mixing projection (x_proj)"),
    fixed("gate_low_rank_dim", kRwkv6, 64, "rank of the decay projection (w_proj)"),
    fixed("norm_first", kRwkv6, true, "the extra LayerNorm (pre_norm) before layer 0"),
    fixed("norm_bias", kRwkv6, true, "LayerNorm biases"),
    fixed("use_gate", kDeltaNet, false, "an output gate (hla's DeltaNet has the plain RMSNorm)"),
    fixed("use_gate", kGdn, true, "the swish output gate (g_proj)"),
    fixed("use_beta", kDeltaNet, true, "the learned write strength beta (b_proj)"),
    fixed("use_output_norm", kDeltaNet, true, "the RMSNorm on the output heads"),
    fixed("qk_norm", kDeltaNet, "l2", "the q, k normalisation"),
    fixed("qk_activation", kDeltaNet, "silu", "the q, k activation"),
    fixed("allow_neg_eigval", kDeltaNet | kGdn | kKda, false, "beta in (0, 2) (negative eigenvalues)"),
    fixed("safe_gate", kKda, false, "KDA's bounded gate"),
    fixed("lower_bound", kKda, nullptr, "KDA's gate lower bound"),
    // Mamba-2
    honoured("head_dim", kMamba2, "head_dim", "head width P"),
    honoured("state_size", kMamba2, "state_size", "state width N"),
    converted("expand", kMamba2, read_mamba2_expand, write_mamba2_expand, "d_inner = hidden_size * expand (hla: expand_v)"),
    converted("num_heads", kMamba2, read_mamba2_heads, write_mamba2_heads, "expand * hidden_size / head_dim (derived)"),
    honoured("conv_kernel", kMamba2, "conv_size", "convolution width"),
    honoured("norm_before_gate", kMamba2, "norm_before_gate", "RMSNorm before (true) or after the z gate"),
    honoured("chunk_size", kMamba2, "chunk_size", "chunk length of the chunked kernel"),
    honoured("n_groups", kMamba2, "n_groups", "groups of B and C, each shared by num_heads / n_groups heads"),
    fixed("use_bias", kMamba2, false, "biases on in_proj and out_proj"),
    fixed("use_conv_bias", kMamba2, true, "the convolution bias (conv1d.bias)"),
    fixed("rmsnorm", kMamba2, true, "the gated RMSNorm before out_proj"),
    fixed("D_has_hdim", kMamba2, false, "D per head (false) or per channel"),
    fixed("dt_limit", kMamba2, json::array({0.0, std::numeric_limits<double>::infinity()}), "a clamp on Delta"),
    ignored("residual_in_fp32", kMamba2, true,
            "the residual stream's dtype under mixed precision: hla keeps it in the master dtype (fp32) either way"),
    // Mamba-2's initialisation (the rules in nn/layers/common.h)
    converted("A_init_range", kMamba2, read_a_init_range, write_a_init_range, "A_log init: ln U(lo, hi)"),
    honoured("dt_min", kMamba2, "dt_min", "dt_bias init: dt ~ exp U(ln dt_min, ln dt_max)"),
    honoured("dt_max", kMamba2, "dt_max", "dt_bias init: dt's upper end"),
    honoured("dt_init_floor", kMamba2, "dt_init_floor", "dt_bias init: dt clamped >= dt_init_floor"),
    converted("conv_init", kMamba2, read_conv_init, write_conv_init,
              "conv1d.weight init: U(-conv_init, conv_init), null = N(0, initializer_range)"),
    honoured("rescale_prenorm_residual", kMamba2, "rescale_residual",
             "out_proj init: kaiming_uniform / sqrt(num_hidden_layers), false = N(0, initializer_range)"),
    // kernels, fusion, caching, token ids, transformers' bookkeeping
    ignored("attn_mode", kHybrid & ~kHgrn, "chunk", "kernel choice: chunked and recurrent kernels compute the same outputs"),
    ignored("attn_mode", kHgrn, "fused_recurrent", "kernel choice: chunked and recurrent kernels compute the same outputs"),
    ignored("max_position_embeddings", kStandard, 2048,
            "fla's RoPE cache length (it grows past it); hla computes RoPE for any position"),
    ignored("fuse_norm", kAll, true, "fused or plain RMSNorm kernels: the same normalisation"),
    ignored("fuse_swiglu", kGatedMlp, true, "fused or plain SwiGLU kernels: the same MLP"),
    ignored("fuse_cross_entropy", kAll, true, "fused or plain cross-entropy kernels: the same loss"),
    ignored("fuse_linear_cross_entropy", kAll & ~kKda, false,
            "lm_head and cross-entropy fused in chunks: the same loss (fla then returns no logits)"),
    ignored("use_cache", kAll, true, "generation cache: what fla keeps between calls, not what it computes"),
    ignored("bos_token_id", kAll, 1, "token ids: the tokenizer's business"),
    ignored("eos_token_id", kAll, 2, "token ids: the tokenizer's business"),
    ignored("pad_token_id", kStandard, nullptr, "token ids: the tokenizer's business"),
    ignored("pad_token_id", kMamba2, 0, "token ids: the tokenizer's business"),
    kept("architectures", kAll, "transformers' class name (hla writes fla's)", write_architectures),
    kept("torch_dtype", kAll, "weights' dtype (hla writes float32)", write_torch_dtype),
    kept("dtype", kAll, "weights' dtype, transformers 5.x (hla writes float32)", write_dtype),
    kept("transformers_version", kAll, "transformers' bookkeeping"),
    kept("_name_or_path", kAll, "transformers' bookkeeping"),
    kept("output_attentions", kAll, "transformers' output flags"),
    kept("output_hidden_states", kAll, "transformers' output flags"),
    kept("return_dict", kAll, "transformers' output flags"),
    kept("tokenizer_class", kAll, "the tokenizer's business"),
    kept("sep_token_id", kAll, "token ids: the tokenizer's business"),
    kept("auto_map", kAll, "transformers' remote-code bookkeeping"),
  };
  return table;
}
// clang-format on

const FlaField* find_row(unsigned bit, const std::string& name) {
  for (const FlaField& f : fla_fields())
    if ((f.types & bit) && name == f.name) return &f;
  return nullptr;
}

std::string model_type_of(const json& j) {
  if (j.contains("model_type") && j["model_type"].is_string()) return j["model_type"].get<std::string>();
  return ModelConfig().model_type;
}

// Reads `value` into the ModelConfig field at `path` (null is 0 where null_for_zero).
void read_hla_field(const char* path, bool null_for_zero, const FlaRead& r) {
  bool found = false;
  ModelConfig::visit_fields(
      [&](const ModelField& f, auto& member) {
        if (f.path() != path) return;
        found = true;
        using T = std::decay_t<decltype(member)>;
        if constexpr (std::is_same_v<T, int>) {
          if (null_for_zero && r.value.is_null()) {
            member = 0;
            return;
          }
        }
        read_setting(r.value, member, r.source, r.field);
      },
      r.c);
  HLA_CHECK(found, "fla table: no ModelConfig field '", path, "'");
}

json write_hla_field(const char* path, bool null_for_zero, const ModelConfig& c) {
  json out = omitted();
  ModelConfig::visit_fields(
      [&](const ModelField& f, const auto& member) {
        if (f.path() != path) return;
        using T = std::decay_t<decltype(member)>;
        if constexpr (std::is_same_v<T, int>) {
          if (member == 0 && (null_for_zero || f.zero_is_null)) {
            out = nullptr;
            return;
          }
          if (member == 0 && f.zero_means) {
            out = (c.*f.zero_means)();
            return;
          }
        }
        out = member;
      },
      c);
  return out;
}

// fla's attn is one specification or a list of them; hla gives every attention layer the same
// settings, so a list must agree on everything but the layers.
void read_attn(const FlaRead& r) {
  if (r.value.is_null()) return;
  json spec = r.value;
  if (r.value.is_array()) {
    HLA_CHECK_INPUT(!r.value.empty() && r.value[0].is_object(), r.source,
                    ": attn must be an object or a list of objects, got ", json_excerpt(r.value));
    spec = r.value[0];
    for (size_t i = 1; i < r.value.size(); i++) {
      json other = r.value[i];
      HLA_CHECK_INPUT(other.is_object() && other.contains("layers") && other["layers"].is_array(), r.source, ": attn[",
                      i, "] must be an object with a 'layers' list, got ", json_excerpt(other));
      for (auto it = other.begin(); it != other.end(); ++it)
        HLA_CHECK_INPUT(it.key() == "layers" || spec.value(it.key(), json()) == it.value(), r.source, ": attn[", i,
                        "].", excerpt(it.key()), " is ", json_excerpt(it.value()), " but attn[0].", excerpt(it.key()), " is ",
                        json_excerpt(spec.value(it.key(), json())),
                        "; hla gives every attention layer the same settings");
      for (const json& layer : other["layers"]) spec["layers"].push_back(layer);
    }
  }
  read_attn_block(spec, r.c, r.source);
}

json write_attn(const ModelConfig& c) {
  if (!c.has_attn) return nullptr;  // fla writes attn: null for a model without attention layers
  json a = json::object();
  a["layers"] = c.attn.layers;
  a["num_heads"] = c.attn_heads();
  a["num_kv_heads"] = c.attn_kv_heads();
  a["qkv_bias"] = false;
  a["window_size"] = c.attn.window_size > 0 ? json(c.attn.window_size) : json(nullptr);
  a["rope_theta"] = c.attn.rope_theta;
  return a;
}

// A pure Mamba-2 model's config.json stays fla's (no attn key); a hybrid's carries its attention
// layers, or hla could not read back the checkpoint it wrote.
json write_mamba2_attn(const ModelConfig& c) { return c.has_attn ? write_attn(c) : omitted(); }

// The "hla" block: hla's settings that fla's config for this model_type has no field for.
bool in_hla_block(const ModelField& f, unsigned bit) {
  if (std::string(f.name) == "routing") return true;
  return std::string(f.name) == "chunk_size" && bit != kMamba2;
}

void read_hla_block(const FlaRead& r) {
  HLA_CHECK_INPUT(r.value.is_object(), r.source, ": hla must be an object {chunk_size, routing}, got ",
                  json_excerpt(r.value));
  const unsigned bit = type_bit(r.c.model_type);
  for (auto it = r.value.begin(); it != r.value.end(); ++it) {
    bool known = false;
    const std::string path = "hla." + it.key();
    ModelConfig::visit_fields([&](const ModelField& f) {
      if (!f.in_attn && f.name == it.key() && in_hla_block(f, bit)) known = true;
    });
    HLA_CHECK_INPUT(known, r.source, ": unknown field '", excerpt(path), "' (the hla block holds ",
                    bit == kMamba2 ? "routing" : "chunk_size, routing", ")");
    read_hla_field(it.key().c_str(), false, FlaRead{it.value(), r.file, r.c, r.source, path});
  }
}

json write_hla_block(const ModelConfig& c) {
  const unsigned bit = type_bit(c.model_type);
  const ModelConfig defaults;
  json block = json::object();
  ModelConfig::visit_fields(
      [&](const ModelField& f, const auto& member, const auto& fallback) {
        if (!f.in_attn && in_hla_block(f, bit) && !(member == fallback)) block[f.name] = member;
      },
      c, defaults);
  if (block.empty()) return omitted();
  return block;
}

// A value for an error message, its infinities as Python writes them (dt_limit's [0.0, Infinity]).
std::string shown(const json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>()))
    return std::isnan(v.get<double>()) ? "NaN" : v.get<double>() > 0 ? "Infinity" : "-Infinity";
  if (!v.is_array()) return json_excerpt(v);
  std::string out = "[";
  for (size_t i = 0; i < v.size(); i++) out += (i ? "," : "") + shown(v[i]);
  return out + "]";
}

void read_row(const FlaField& row, const FlaRead& r) {
  switch (row.use) {
    case Use::Honoured:
      if (row.read) row.read(r);
      else read_hla_field(row.hla_field, row.null_for_zero, r);
      break;
    case Use::Ignored: r.c.fla_kept[row.name] = r.value; break;
    case Use::Fixed:
      HLA_CHECK_INPUT(r.value == row.value, r.source, ": ", row.name, " is ", shown(r.value), "; hla implements ",
                      r.c.model_type, " only with ", row.name, " = ", shown(row.value), " (", row.meaning, ")");
      break;
  }
}

json write_row(const FlaField& row, const ModelConfig& c) {
  switch (row.use) {
    case Use::Honoured: return row.write ? row.write(c) : write_hla_field(row.hla_field, row.null_for_zero, c);
    case Use::Ignored:
      if (row.write) return row.write(c);
      if (c.fla_kept.contains(row.name)) return c.fla_kept[row.name];
      return row.keep_only ? omitted() : row.value;
    case Use::Fixed: return row.value;
  }
  return omitted();
}

}  // namespace

std::string first_non_fla_field(const json& j) {
  const unsigned bit = type_bit(model_type_of(j));
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "model_type" && !(bit && find_row(bit, it.key()))) return it.key();
  return "";
}

bool is_fla_config(const json& j) {
  if (!j.is_object() || (j.contains("model_type") && !j["model_type"].is_string())) return false;  // hla's reader says why
  return type_bit(model_type_of(j)) && first_non_fla_field(j).empty();
}

ModelConfig parse_fla_config(const json& j, const std::string& source, const ModelConfig& defaults) {
  ModelConfig c = defaults;
  c.model_type = model_type_of(j);
  c.has_attn = false;
  c.attn = AttnConfig();
  c.fla_kept = json::object();
  const unsigned bit = type_bit(c.model_type);
  for (const FlaField& row : fla_fields()) {
    if (!(row.types & bit) || !j.contains(row.name)) continue;
    const std::string field = row.name;
    read_row(row, FlaRead{j[row.name], j, c, source, field});
  }
  return c;
}

json fla_config_json(const ModelConfig& c) {
  json j = json::object();
  j["model_type"] = c.model_type;
  const unsigned bit = type_bit(c.model_type);
  for (const FlaField& row : fla_fields()) {
    if (!(row.types & bit)) continue;
    json v = write_row(row, c);
    if (!v.is_discarded()) j[row.name] = std::move(v);
  }
  return j;
}

}  // namespace hla
