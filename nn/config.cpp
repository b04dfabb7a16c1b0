// ModelConfig <-> config.json through the field list, the hybrid shorthand and validation
// (see config.h).
#include "nn/config.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "nn/fla_config.h"
#include "nn/layers/mixers.h"
#include "nn/weights.h"
#include "tensor/error.h"
#include "tensor/json.h"

namespace hla {

namespace {

const char* const kRoutingNames[] = {"none", "clvr", "cler", "cler_h"};  // in Routing's order

}  // namespace

const char* routing_name(Routing r) { return kRoutingNames[static_cast<int>(r)]; }

Routing parse_routing(const std::string& text, const std::string& where) {
  for (int i = 0; i < 4; i++)
    if (text == kRoutingNames[i]) return static_cast<Routing>(i);
  fail(where, " must be one of none, clvr, cler, cler_h, got '", text, "'");
}

std::ostream& operator<<(std::ostream& os, Routing r) { return os << routing_name(r); }

std::string ModelField::key() const { return in_attn ? std::string("attn_") + name : name; }
std::string ModelField::path() const { return in_attn ? std::string("attn.") + name : name; }

std::vector<int> hybrid_attention_layers(int num_layers, const std::string& hybrid) {
  std::vector<int> layers;
  if (hybrid == "pure") return layers;
  if (hybrid == "transformer") {
    for (int i = 0; i < num_layers; i++) layers.push_back(i);
    return layers;
  }
  int r = 0;
  char tail[8] = {0};
  if (std::sscanf(hybrid.c_str(), "%d:%7s", &r, tail) != 2 || std::string(tail) != "1" || r < 1)
    fail("hybrid '", hybrid, "' is not one of pure, transformer or r:1 (e.g. 24:1, 12:1, 6:1, 3:1)");
  for (int i = 0; i < num_layers; i++)
    if ((i + 1) % r == 0) layers.push_back(i);  // one attention layer closes each group of r
  return layers;
}

void ModelConfig::set_hybrid(const std::string& hybrid) {
  attn.layers = hybrid_attention_layers(num_hidden_layers, hybrid);
  has_attn = !attn.layers.empty();
}

bool ModelConfig::is_attention_layer(int i) const {
  if (mixer().family == MixerFamily::Attention) return true;
  return std::find(attn.layers.begin(), attn.layers.end(), i) != attn.layers.end();
}

std::string ModelConfig::pattern() const {
  // Group by the distance between attention layers when it is regular, else by 6.
  int group = 6;
  if (attn.layers.size() >= 1 && mixer().family != MixerFamily::Attention) {
    int first = attn.layers[0] + 1;
    bool regular = true;
    for (size_t i = 0; i < attn.layers.size(); i++)
      regular = regular && attn.layers[i] == static_cast<int>((i + 1) * first - 1);
    if (regular && first > 1) group = first;
  }
  std::string s;
  for (int i = 0; i < num_hidden_layers; i++) {
    if (i > 0 && i % group == 0) s += ' ';
    s += is_attention_layer(i) ? 'A' : 'L';
  }
  return s;
}

const MixerSpec& ModelConfig::mixer() const { return find_mixer(model_type, "model config"); }

int ModelConfig::key_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }
int ModelConfig::value_heads() const { return num_v_heads > 0 ? num_v_heads : num_heads; }
int ModelConfig::attn_heads() const { return attn.num_heads > 0 ? attn.num_heads : num_heads; }
int ModelConfig::attn_kv_heads() const { return attn.num_kv_heads > 0 ? attn.num_kv_heads : attn_heads(); }

int ModelConfig::mlp_intermediate_size() const {
  if (intermediate_size > 0) return intermediate_size;
  // I = 256 * ceil(floor(D * hidden_ratio * 2/3) / 256)   (mixers.md 2.8)
  int64_t base = static_cast<int64_t>(std::floor(hidden_size * hidden_ratio * 2.0 / 3.0));
  return static_cast<int>(256 * ((base + 255) / 256));
}

bool ModelConfig::uses_short_conv() const {
  ShortConv conv = mixer().short_conv;
  return conv == ShortConv::Always || (conv == ShortConv::Optional && use_short_conv);
}

bool ModelConfig::uses_state_size() const { return mixer().state_size; }

bool ModelConfig::uses_mamba2_init() const { return mixer().block == BlockStyle::Mamba2; }

namespace {

// A field's value against its range: "c.json: conv_size must be >= 1 with short convolutions
// (model_type gated_deltanet), got 0".
template <class T>
void check_range(const ModelField& f, const T& value, const ModelConfig& c, const std::string& source) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (f.applies && !(c.*f.applies)()) return;
    bool ok = f.min_exclusive ? value > f.min : value >= f.min;
    std::string condition = f.applies ? std::string(" ") + f.applies_text + " (model_type " + c.model_type + ")" : "";
    HLA_CHECK_INPUT(ok, source, ": ", f.path(), " must be ", f.min_exclusive ? "> " : ">= ", f.min, condition, ", got ",
                    value);
    HLA_CHECK_INPUT(value <= f.max, source, ": ", f.path(), " must be <= ", f.max, " (", f.max_reason, "), got ", value);
  }
}

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

// x * scale as a whole number of channels that fits an int, or an error naming both fields.
int64_t whole_product(int64_t x, const char* x_name, double scale, const char* scale_name, const std::string& source) {
  double product = static_cast<double>(x) * scale;
  HLA_CHECK_INPUT(product == std::floor(product), source, ": ", x_name, " ", x, " * ", scale_name, " ", scale, " = ",
                  product, " is not a whole number of channels");
  HLA_CHECK_INPUT(product <= kIntMax, source, ": ", x_name, " ", x, " * ", scale_name, " ", scale, " = ", product,
                  " is more than ", kIntMax, " channels");
  return static_cast<int64_t>(product);
}

void check_divides(int64_t divisor, const char* divisor_name, int64_t width, const char* width_name,
                   const std::string& source, const char* hint = "") {
  HLA_CHECK_INPUT(width % divisor == 0, source, ": ", divisor_name, " ", divisor, " does not divide ", width_name, " ",
                  width, hint);
}

// The GatedMLP rule's width (mlp_intermediate_size) fits an int.
void check_mlp_width(const ModelConfig& c, const std::string& source) {
  if (c.intermediate_size > 0) return;
  double base = std::floor(c.hidden_size * c.hidden_ratio * 2.0 / 3.0);
  HLA_CHECK_INPUT(base + 255 <= kIntMax, source, ": hidden_size ", c.hidden_size, " * hidden_ratio ", c.hidden_ratio,
                  " gives an MLP width of ", base, ", more than ", kIntMax);
}

std::string mixers_where(bool (*pick)(const MixerSpec&)) {
  std::ostringstream os;
  for (const MixerSpec& m : mixer_table())
    if (pick(m)) os << " " << m.model_type;
  return os.str();
}

// The head widths of the mixer's HeadShape are whole and divide as the layer needs.
void check_heads(const ModelConfig& c, const MixerSpec& m, const std::string& source) {
  switch (m.heads) {
    case HeadShape::None: break;
    case HeadShape::HeadDim:
      if (c.head_dim == 0) check_divides(c.num_heads, "num_heads", c.hidden_size, "hidden_size", source, " (or set head_dim)");
      whole_product(c.key_head_dim(), "head_dim", c.expand_v, "expand_v", source);
      break;
    case HeadShape::Expand:
      check_divides(c.num_heads, "num_heads", whole_product(c.hidden_size, "hidden_size", c.expand_k, "expand_k", source),
                    "hidden_size * expand_k", source);
      check_divides(c.num_heads, "num_heads", whole_product(c.hidden_size, "hidden_size", c.expand_v, "expand_v", source),
                    "hidden_size * expand_v", source);
      break;
    case HeadShape::Split: check_divides(c.num_heads, "num_heads", c.hidden_size, "hidden_size", source); break;
    case HeadShape::InnerByP:
      if (c.head_dim == 0) check_divides(c.num_heads, "num_heads", c.hidden_size, "hidden_size", source, " (or set head_dim)");
    {
      const int64_t inner = whole_product(c.hidden_size, "hidden_size", c.expand_v, "expand_v", source);
      check_divides(c.key_head_dim(), "head_dim", inner, "d_inner = hidden_size * expand_v", source);
      check_divides(c.n_groups, "n_groups", inner / c.key_head_dim(), "the heads, d_inner / head_dim =", source);
      break;
    }
  }
  switch (m.value_heads) {
    case ValueHeads::Unused: break;
    case ValueHeads::SameAsHeads:
      HLA_CHECK_INPUT(c.value_heads() == c.num_heads, source, ": num_v_heads ", c.value_heads(), " != num_heads ", c.num_heads,
                ": grouped value heads are not supported by ", c.model_type, " (they are by",
                mixers_where([](const MixerSpec& s) { return s.value_heads == ValueHeads::Grouped; }), ")");
      break;
    case ValueHeads::Grouped:
      HLA_CHECK_INPUT(c.value_heads() % c.num_heads == 0, source, ": num_v_heads ", c.value_heads(),
                " is not a multiple of num_heads ", c.num_heads);
      break;
  }
}

// Mamba-2's init fields: fla's rules between them (a positive pair lo <= hi, dt_min <= dt_max);
// for any other mixer they must keep their defaults, as nothing reads them there.
void check_mamba2_init(const ModelConfig& c, const std::string& source) {
  if (!c.uses_mamba2_init()) {
    const ModelConfig defaults;
    ModelConfig::visit_fields(
        [&](const ModelField& f, const auto& value, const auto& fallback) {
          if (f.applies != &ModelConfig::uses_mamba2_init || value == fallback) return;
          fail(source, ": ", f.path(), " is ", nlohmann::json(value).dump(), " but only mamba2 reads it; model_type ",
               c.model_type, " initialises its gates as fla's layer does (leave ", f.path(), " at its default ",
               nlohmann::json(fallback).dump(), ")");
        },
        c, defaults);
    return;
  }
  const std::vector<double>& a = c.a_init_range;
  HLA_CHECK_INPUT(a.size() == 2 && a[0] > 0 && a[0] <= a[1], source, ": A_init_range must be a pair [lo, hi] with 0 < lo <= hi, got ",
                  nlohmann::json(a).dump());
  HLA_CHECK_INPUT(c.dt_min <= c.dt_max, source, ": dt_min ", c.dt_min, " is above dt_max ", c.dt_max);
}

}  // namespace

namespace {

constexpr int64_t kCountMax = std::numeric_limits<int64_t>::max();  // "at least this many": saturated

int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kCountMax : r;
}

int64_t saturating_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? kCountMax : r;
}

// The widths of a linear layer's keys and values, all heads together, by the mixer's HeadShape
// (check_heads has made them whole numbers that fit an int).
struct MixerWidths {
  int64_t keys, values;
};

MixerWidths mixer_widths(const ModelConfig& c, const MixerSpec& m) {
  const int64_t D = c.hidden_size;
  switch (m.heads) {
    case HeadShape::HeadDim: {
      const int64_t dk = c.key_head_dim();
      return {saturating_mul(c.num_heads, dk), saturating_mul(c.value_heads(), static_cast<int64_t>(dk * c.expand_v))};
    }
    case HeadShape::Expand: return {static_cast<int64_t>(D * c.expand_k), static_cast<int64_t>(D * c.expand_v)};
    case HeadShape::InnerByP: return {static_cast<int64_t>(D * c.expand_v), static_cast<int64_t>(D * c.expand_v)};
    case HeadShape::None:
    case HeadShape::Split: break;
  }
  return {D, D};
}

// The MLP of one block, by block style: GatedMLP's gate, up and down; RWKV-6's receptance, and
// its key and value when intermediate_size is given; Mamba-2 has none.
int64_t min_mlp_parameters(const ModelConfig& c, const MixerSpec& m) {
  const int64_t D = c.hidden_size;
  switch (m.block) {
    case BlockStyle::Standard: return saturating_mul(3 * D, c.mlp_intermediate_size());
    case BlockStyle::Rwkv6: return saturating_add(saturating_mul(D, D), saturating_mul(2 * D, c.intermediate_size));
    case BlockStyle::Mamba2: break;
  }
  return 0;
}

int64_t min_linear_layer_parameters(const ModelConfig& c, const MixerSpec& m) {
  const int64_t D = c.hidden_size;
  const MixerWidths w = mixer_widths(c, m);
  int64_t n = saturating_mul(D, saturating_add(w.keys, saturating_mul(2, w.values)));
  if (c.uses_short_conv()) n = saturating_add(n, saturating_mul(w.values, c.conv_size));
  if (c.uses_state_size()) n = saturating_add(n, saturating_mul(saturating_mul(2 * D, c.state_size), c.n_groups));
  return n;
}

// "c.json: the model would have at least 1.2e12 parameters (...), more than hla's limit ...".
void check_model_size(const ModelConfig& c, const std::string& source) {
  const int64_t n = c.min_parameter_count();
  if (n <= kMaxParameters) return;
  const int64_t bytes = saturating_mul(n, 4);
  std::ostringstream counted;
  if (n == kCountMax) counted << n << " parameters (the count overflows int64)";
  else if (bytes == kCountMax) counted << n << " parameters (more than " << kCountMax << " bytes in fp32)";
  else counted << n << " parameters (" << bytes << " bytes in fp32)";
  fail(source, ": the model would have at least ", counted.str(), ", more than hla's limit of ", kMaxParameters,
       " parameters (64 GiB in fp32; training holds about 4 times that: weights, gradients and two AdamW moments)");
}

}  // namespace

int64_t ModelConfig::min_parameter_count() const {
  const MixerSpec& m = mixer();
  const int64_t D = hidden_size;
  const int64_t attention_layers = m.family == MixerFamily::Attention ? num_hidden_layers : attn.layers.size();
  const int64_t linear_layers = num_hidden_layers - attention_layers;
  const int64_t mlp = min_mlp_parameters(*this, m);
  int64_t n = saturating_mul(saturating_mul(vocab_size, D), tie_word_embeddings ? 1 : 2);
  n = saturating_add(n, saturating_mul(linear_layers, saturating_add(min_linear_layer_parameters(*this, m), mlp)));
  n = saturating_add(n, saturating_mul(attention_layers, saturating_add(saturating_mul(2 * D, D), mlp)));
  return n;
}

void ModelConfig::validate(const std::string& source) const {
  const MixerSpec& m = find_mixer(model_type, source);
  visit_fields([&](const ModelField& f, const auto& value) { check_range(f, value, *this, source); }, *this);
  check_heads(*this, m, source);
  check_mlp_width(*this, source);
  std::set<int> seen;
  for (int i : attn.layers) {
    HLA_CHECK_INPUT(i >= 0 && i < num_hidden_layers, source, ": attn.layers has index ", i, " outside [0, ",
                    num_hidden_layers, ")");
    HLA_CHECK_INPUT(seen.insert(i).second, source, ": attn.layers lists layer ", i, " twice");
  }
  if (has_attn || m.family == MixerFamily::Attention) {
    check_divides(attn_heads(), "attn.num_heads", hidden_size, "hidden_size", source);
    HLA_CHECK_INPUT(attn_heads() % attn_kv_heads() == 0, source, ": attn.num_heads ", attn_heads(),
                    " is not a multiple of attn.num_kv_heads ", attn_kv_heads());
  }
  check_mamba2_init(*this, source);
  if (!m.serves(routing)) {
    bool wants_error = routing == Routing::Cler || routing == Routing::ClerH;
    std::string servers = wants_error ? mixers_where([](const MixerSpec& s) { return s.routes_error; })
                                      : mixers_where([](const MixerSpec& s) { return s.routes_values; });
    fail(source, ": routing '", routing, "' needs ", wants_error ? "the delta-rule write residual" : "the values",
         " of a linear mixer, which model_type '", model_type, "' does not give (mixers that do:", servers, ")");
  }
  check_model_size(*this, source);
}

namespace {

// Whether v is an integer that I holds (nlohmann keeps non-negative integers unsigned).
template <class I>
bool fits(const nlohmann::json& v) {
  using L = std::numeric_limits<I>;
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(L::max());
  if (!v.is_number_integer()) return false;
  const int64_t x = v.get<int64_t>();
  return x >= static_cast<int64_t>(L::min()) && (x < 0 || static_cast<uint64_t>(x) <= static_cast<uint64_t>(L::max()));
}

template <class I>
std::string integer_range() {
  std::ostringstream os;
  os << "[" << std::numeric_limits<I>::min() << ", " << std::numeric_limits<I>::max() << "]";
  return os.str();
}

template <class I>
void read_integer(const nlohmann::json& v, I& out, const std::string& source, const std::string& field) {
  HLA_CHECK_INPUT(fits<I>(v), source, ": ", field, " must be an integer in ", integer_range<I>(), ", got ",
                  json_excerpt(v));
  out = v.is_number_unsigned() ? static_cast<I>(v.get<uint64_t>()) : static_cast<I>(v.get<int64_t>());
}

}  // namespace

void read_setting(const nlohmann::json& v, bool& out, const std::string& source, const std::string& field) {
  HLA_CHECK_INPUT(v.is_boolean(), source, ": ", field, " must be true or false, got ", json_excerpt(v));
  out = v.get<bool>();
}

void read_setting(const nlohmann::json& v, int& out, const std::string& source, const std::string& field) {
  read_integer(v, out, source, field);
}

void read_setting(const nlohmann::json& v, int64_t& out, const std::string& source, const std::string& field) {
  read_integer(v, out, source, field);
}

void read_setting(const nlohmann::json& v, uint64_t& out, const std::string& source, const std::string& field) {
  read_integer(v, out, source, field);
}

void read_setting(const nlohmann::json& v, double& out, const std::string& source, const std::string& field) {
  HLA_CHECK_INPUT(v.is_number(), source, ": ", field, " must be a number, got ", json_excerpt(v));
  out = v.get<double>();
  HLA_CHECK_INPUT(std::isfinite(out), source, ": ", field, " must be a finite number, got ", out);
}

void read_setting(const nlohmann::json& v, std::string& out, const std::string& source, const std::string& field) {
  HLA_CHECK_INPUT(v.is_string(), source, ": ", field, " must be a string, got ", json_excerpt(v));
  out = v.get<std::string>();
}

void read_setting(const nlohmann::json& v, Routing& out, const std::string& source, const std::string& field) {
  std::string name;
  read_setting(v, name, source, field);
  out = parse_routing(name, source + ": " + field);
}

void read_setting(const nlohmann::json& v, std::vector<int>& out, const std::string& source, const std::string& field) {
  HLA_CHECK_INPUT(v.is_array() && std::all_of(v.begin(), v.end(), fits<int>), source, ": ", field,
                  " must be a list of integers in ", integer_range<int>(), ", got ", json_excerpt(v));
  out.clear();
  for (const nlohmann::json& e : v) out.push_back(static_cast<int>(e.get<int64_t>()));
}

void read_setting(const nlohmann::json& v, std::vector<double>& out, const std::string& source, const std::string& field) {
  const auto finite = [](const nlohmann::json& e) { return e.is_number() && std::isfinite(e.get<double>()); };
  HLA_CHECK_INPUT(v.is_array() && std::all_of(v.begin(), v.end(), finite), source, ": ", field,
                  " must be a list of finite numbers, got ", json_excerpt(v));
  out.clear();
  for (const nlohmann::json& e : v) out.push_back(e.get<double>());
}

namespace {

std::set<std::string> field_names(bool in_attn) {
  std::set<std::string> names;
  ModelConfig::visit_fields([&](const ModelField& f) {
    if (f.in_attn == in_attn) names.insert(f.name);
  });
  return names;
}

// hla's own format accepts these fla fields (they change nothing in hla's math) and drops them;
// fla's format has its own table (nn/fla_config.cpp).
const std::set<std::string> kIgnoredFields = {
    "architectures", "torch_dtype", "transformers_version", "fuse_norm", "fuse_swiglu", "fuse_cross_entropy",
    "bos_token_id", "eos_token_id", "pad_token_id", "hidden_act", "max_position_embeddings", "use_cache"};

bool is_hla_field(const std::string& key) {
  static const std::set<std::string> top_fields = field_names(false);
  return top_fields.count(key) || kIgnoredFields.count(key) || key == "attn" || key == "hybrid";
}

// `key` is neither hla's nor (with the file's other fields) fla's: "c.json: unknown field 'x'";
// when key is fla's, the field that makes the file not fla's is named instead, and where that
// one is hla's own, the error says the file mixes the two formats.
void fail_unknown_field(const nlohmann::json& j, const std::string& key, const std::string& source) {
  const std::string not_fla = first_non_fla_field(j);
  nlohmann::json fla_only = nlohmann::json::object();
  fla_only[key] = j[key];
  const bool typed = j.contains("model_type") && j["model_type"].is_string();  // a bad type is named later
  fla_only["model_type"] = typed ? j["model_type"] : nlohmann::json(ModelConfig().model_type);
  const bool key_is_fla = not_fla != key && first_non_fla_field(fla_only).empty();
  if (key_is_fla && is_hla_field(not_fla))
    fail(source, ": field '", excerpt(key), "' is fla's (nn/fla_config.cpp) but field '", excerpt(not_fla),
         "' is hla's own format; an fla config.json keeps hla's settings in its 'hla' block");
  fail(source, ": unknown field '", excerpt(key_is_fla ? not_fla : key), "'");
}

}  // namespace

void read_attn_block(const nlohmann::json& block, ModelConfig& c, const std::string& source) {
  static const std::set<std::string> attn_fields = field_names(true);
  HLA_CHECK_INPUT(block.is_object(), source, ": field 'attn' must be an object {layers, num_heads, ...}");
  for (auto it = block.begin(); it != block.end(); ++it)
    HLA_CHECK_INPUT(attn_fields.count(it.key()) || it.key() == "qkv_bias", source, ": unknown field 'attn.", excerpt(it.key()),
                    "'");
  HLA_CHECK_INPUT(block.contains("layers"), source, ": 'attn' needs a 'layers' list");
  HLA_CHECK_INPUT(!block.contains("qkv_bias") || block["qkv_bias"] == false, source, ": attn.qkv_bias is ",
                  json_excerpt(block["qkv_bias"]), "; hla's attention layers have no q/k/v biases (supports false)");
  ModelConfig::visit_fields(
      [&](const ModelField& f, auto& member) {
        if (f.in_attn && block.contains(f.name) && !block[f.name].is_null())
          read_setting(block[f.name], member, source, f.path());
      },
      c);
  c.has_attn = true;
}

ModelConfig ModelConfig::parse_json(const nlohmann::json& j, const std::string& source, const ModelConfig& defaults) {
  HLA_CHECK_INPUT(j.is_object(), source, ": a model config must be a JSON object");
  if (j.contains("model_type") && j["model_type"].is_string()) find_mixer(j["model_type"].get<std::string>(), source);
  if (is_fla_config(j)) return parse_fla_config(j, source, defaults);
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!is_hla_field(it.key())) fail_unknown_field(j, it.key(), source);
  ModelConfig c = defaults;
  visit_fields(
      [&](const ModelField& f, auto& member) {
        if (!f.in_attn && j.contains(f.name) && !j[f.name].is_null()) read_setting(j[f.name], member, source, f.path());
      },
      c);
  c.has_attn = false;
  if (j.contains("attn") && !j["attn"].is_null()) read_attn_block(j["attn"], c, source);
  if (j.contains("hybrid")) {
    HLA_CHECK_INPUT(!j.contains("attn"), source, ": give either 'hybrid' or 'attn.layers', not both");
    std::string hybrid;
    read_setting(j["hybrid"], hybrid, source, "hybrid");
    try {
      c.set_hybrid(hybrid);
    } catch (const Error& e) {
      fail(source, ": ", e.what());
    }
  }
  return c;
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& source) {
  ModelConfig c = parse_json(j, source, ModelConfig());
  c.validate(source);
  return c;
}

nlohmann::json ModelConfig::to_json() const { return fla_config_json(*this); }

ModelConfig ModelConfig::load(const std::string& path) { return from_json(read_json_file(path), path); }

void ModelConfig::save(const std::string& path) const { write_model_config_file(path, to_json()); }

}  // namespace hla
