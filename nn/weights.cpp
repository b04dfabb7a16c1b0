// Model weights in safetensors and JSON files, written whole or not at all (see weights.h).
#include "nn/weights.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "nn/config.h"
#include "nn/layers/mixers.h"
#include "tensor/atomic_file.h"
#include "tensor/json.h"
#include "tensor/safetensors.h"

namespace hla {

void save_model_weights(const std::string& dir, const ParameterList& params) {
  NamedTensors weights;
  for (const NamedParameter& p : params) weights.emplace_back(p.name, p.var.value().to(Device::CPU));
  save_safetensors(dir + "/" + kModelWeightsFile, weights, {{"format", "pt"}});
}

namespace {

double as_double(double v) { return v; }
double as_double(float v) { return v; }
double as_double(bf16 v) { return bf16_bits_to_f32(v.bits); }

// A weight file with a NaN or an Inf would evaluate to "loss null": refuse it, naming the tensor
// and the first bad element (flat index). One pass over the values.
void check_finite(const std::string& path, const std::string& name, const Tensor& t) {
  auto scan = [&](auto tag) {
    using T = decltype(tag);
    const T* values = t.data<T>();
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; i++) {
      const double v = as_double(values[i]);
      if (!std::isfinite(v))
        fail(path, ": tensor '", name, "' holds ", v, " at index ", i, " of ", n,
             ": the file is damaged (hla never saves non-finite weights)");
    }
  };
  if (t.dtype() == DType::F32) scan(float{});
  if (t.dtype() == DType::F64) scan(double{});
  if (t.dtype() == DType::BF16) scan(bf16{});
}

}  // namespace

namespace {

// A tensor of the checkpoint and the file it came from.
struct StoredTensor {
  Tensor value;
  std::string path;
  std::string file_dtype;  // as the file stores it: F16 is read widened to F32 (tensor/safetensors.h)
};

// The checkpoint's tensors: model.safetensors, or the shards model.safetensors.index.json lists
// (its weight_map says which file holds each tensor, and each file holds what it says).
// `where` gets the file that lists the tensors (model.safetensors or the index), for errors.
std::map<std::string, StoredTensor> read_checkpoint_tensors(const std::string& dir, std::vector<std::string>& order,
                                                            std::string& where) {
  std::map<std::string, StoredTensor> out;
  const std::string single = dir + "/" + kModelWeightsFile, index_path = dir + "/" + kModelWeightsIndexFile;
  auto add = [&](const SafetensorsFile& file) {
    for (const auto& [name, t] : file.tensors) {
      HLA_CHECK_INPUT(!out.count(name), file.path, ": tensor '", name, "' is also in ", out[name].path);
      const auto widened = file.widened.find(name);
      out[name] = {t, file.path, widened != file.widened.end() ? widened->second : dtype_name(t.dtype())};
      order.push_back(name);
    }
  };
  if (std::filesystem::exists(single) || !std::filesystem::exists(index_path)) {
    HLA_CHECK(std::filesystem::exists(single), "checkpoint ", dir, ": no ", kModelWeightsFile,
              " (is it a checkpoint directory?)");
    add(load_safetensors(single));
    where = single;
    return out;
  }
  where = index_path;
  const nlohmann::json index = read_json_file(index_path);
  HLA_CHECK_INPUT(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), index_path,
                  ": needs an object 'weight_map' {tensor name: shard file}");
  std::vector<std::string> shards;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    HLA_CHECK_INPUT(it.value().is_string() && it.value().get<std::string>().find('/') == std::string::npos, index_path,
                    ": weight_map.", it.key(), " must be a file name in the checkpoint directory, got ",
                    json_excerpt(it.value()));
    if (std::find(shards.begin(), shards.end(), it.value().get<std::string>()) == shards.end())
      shards.push_back(it.value().get<std::string>());
  }
  for (const std::string& shard : shards) add(load_safetensors(dir + "/" + shard));
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    const std::string listed = dir + "/" + it.value().get<std::string>();
    HLA_CHECK_INPUT(out.count(it.key()), index_path, ": weight_map puts tensor '", it.key(), "' in ", listed,
                    ", which does not hold it");
    HLA_CHECK_INPUT(out[it.key()].path == listed, index_path, ": weight_map puts tensor '", it.key(), "' in ", listed,
                    " but it is in ", out[it.key()].path);
  }
  for (const auto& [name, stored] : out)
    HLA_CHECK_INPUT(index["weight_map"].contains(name), stored.path, ": tensor '", name, "' is not in ", index_path,
                    "'s weight_map");
  return out;
}

// Whether a stored tensor of dtype `from` loads into a parameter of dtype `to`: the same, or a
// lower-precision float widened (bf16 weights into fp32 master weights; fp16 weights arrive
// already widened to F32 by the reader).
bool widens(DType from, DType to) {
  return from == to || (from == DType::BF16 && (to == DType::F32 || to == DType::F64)) ||
         (from == DType::F32 && to == DType::F64);
}

// " (config.json: ...)": which setting of the checkpoint's config.json decided that the model
// has, or has no, tensor `name`, or its width `expected`; "" when config.json does not say.
std::string config_reason(const std::string& dir, const std::string& name, bool missing, int64_t expected = -1) {
  ModelConfig c;
  try {
    c = ModelConfig::load(dir + "/" + kModelConfigFile);
  } catch (const Error&) {
    return "";
  }
  std::ostringstream why;
  if (expected >= 0) {
    const std::vector<std::pair<int64_t, std::string>> widths = {
        {c.vocab_size, "vocab_size"},
        {c.hidden_size, "hidden_size"},
        {c.mlp_intermediate_size(), "intermediate_size"},
        {c.conv_size, "conv_size"},
        {c.state_size, "state_size"},
        {c.num_heads, "num_heads"},
        {c.value_heads(), "num_v_heads"},
        {c.key_head_dim(), "head_dim"},
        {int64_t{c.num_heads} * c.key_head_dim(), "num_heads * head_dim"},
        {static_cast<int64_t>(c.value_heads() * c.key_head_dim() * c.expand_v), "num_v_heads * head_dim * expand_v"},
        {static_cast<int64_t>(c.hidden_size * c.expand_k), "hidden_size * expand_k"},
        {static_cast<int64_t>(c.hidden_size * c.expand_v), "hidden_size * expand_v"},
        {int64_t{c.attn_kv_heads()} * (c.hidden_size / c.attn_heads()), "attn.num_kv_heads * hidden_size / attn.num_heads"},
        {c.num_hidden_layers, "num_hidden_layers"}};
    for (const auto& [width, field] : widths)
      if (width == expected) return " (config.json: " + field + " gives " + std::to_string(expected) + ")";
    return "";
  }
  const size_t at = name.find("layers.");
  if (name.find("lm_head") != std::string::npos)
    why << "tie_word_embeddings is " << (missing ? "false" : "true");
  else if (name.find("conv1d") != std::string::npos && c.mixer().short_conv == ShortConv::Optional)
    why << "use_short_conv is " << (missing ? "true" : "false");
  else if (at != std::string::npos) {
    const int layer = std::atoi(name.c_str() + at + 7);
    if (layer >= c.num_hidden_layers) why << "num_hidden_layers is " << c.num_hidden_layers;
    else if (c.is_attention_layer(layer)) why << "layer " << layer << " is softmax attention (attn.layers)";
    else why << "layer " << layer << " is a " << c.model_type << " layer (model_type, attn.layers)";
  } else {
    why << "model_type is " << c.model_type;
  }
  return " (config.json: " + why.str() + ")";
}

// The first dimension where two shapes differ (the lower rank's end when one is a prefix).
int64_t first_difference(const Shape& got, const Shape& want) {
  for (size_t i = 0; i < want.size(); i++)
    if (i >= got.size() || got[i] != want[i]) return want[i];
  return -1;
}

}  // namespace

void load_model_weights(const std::string& dir, const ParameterList& params) {
  std::vector<std::string> order;
  std::string where;
  const std::map<std::string, StoredTensor> stored = read_checkpoint_tensors(dir, order, where);
  std::set<std::string> names, lower_precision;  // the file dtypes converted up to the master dtype
  for (const NamedParameter& p : params) {
    names.insert(p.name);
    auto it = stored.find(p.name);
    HLA_CHECK_INPUT(it != stored.end(), where, ": no tensor named '", p.name,
              "'", config_reason(dir, p.name, true));
    const Tensor& saved = it->second.value;
    const std::string& path = it->second.path;
    const Tensor& value = p.var.value();
    HLA_CHECK_INPUT(saved.shape() == value.shape(), path, ": tensor '", p.name, "' has shape ", shape_str(saved.shape()),
              " but the model expects ", shape_str(value.shape()),
              config_reason(dir, p.name, false, first_difference(saved.shape(), value.shape())));
    HLA_CHECK_INPUT(widens(saved.dtype(), value.dtype()), path, ": tensor '", p.name, "' is ", it->second.file_dtype,
              " but the model expects ", dtype_name(value.dtype()));
    if (it->second.file_dtype != dtype_name(value.dtype())) lower_precision.insert(it->second.file_dtype);
    check_finite(path, p.name, saved);
  }
  for (const std::string& name : order)
    HLA_CHECK_INPUT(names.count(name), stored.at(name).path, ": tensor '", name, "' is not a parameter of this model",
              config_reason(dir, name, false));
  if (!lower_precision.empty()) {
    std::string stored;
    for (const std::string& d : lower_precision) stored += (stored.empty() ? "" : ", ") + d;
    std::cerr << "note: " << dir << ": weights stored in lower precision (" << stored
              << ") are converted to the model's master dtype (" << dtype_name(params.front().var.value().dtype())
              << ")\n";
  }
  for (const NamedParameter& p : params) {
    Var v = p.var;
    v.mutable_value().copy_(stored.at(p.name).value.to(p.var.value().dtype()));
    p.refresh_compute_copy();
  }
}

namespace {

constexpr char kFloatKey[] = "__float__";  // transformers 5.x: {"__float__": "Infinity"}
constexpr char kNonFiniteMark[] = "__hla_non_finite__:";

// Python's json writes inf and nan as the bare words Infinity, -Infinity, NaN (transformers
// 4.x config.json); outside strings they become 5.x's {"__float__": "..."} objects.
std::string quote_python_non_finite(const std::string& text) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); i++) {
    const char ch = text[i];
    if (in_string) {
      out += ch;
      if (ch == '\\' && i + 1 < text.size()) out += text[++i];
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    bool replaced = false;
    for (const char* word : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::strlen(word);
      if (text.compare(i, n, word) == 0) {
        out += std::string("{\"") + kFloatKey + "\": \"" + word + "\"}";
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += ch;
  }
  return out;
}

// {"__float__": "Infinity" | "-Infinity" | "NaN"} -> the number, everywhere in j.
void decode_float_objects(nlohmann::json& j) {
  if (j.is_object() && j.size() == 1 && j.contains(kFloatKey) && j[kFloatKey].is_string()) {
    const std::string word = j[kFloatKey].get<std::string>();
    const double inf = std::numeric_limits<double>::infinity();
    if (word == "Infinity") j = inf;
    else if (word == "-Infinity") j = -inf;
    else if (word == "NaN") j = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  if (j.is_structured())
    for (auto& e : j) decode_float_objects(e);
}

// Non-finite numbers -> marked strings, which write_model_config_file turns into Python's words.
nlohmann::json mark_non_finite(const nlohmann::json& j) {
  if (j.is_number_float() && !std::isfinite(j.get<double>())) {
    const double v = j.get<double>();
    return std::string(kNonFiniteMark) + (std::isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
  }
  nlohmann::json out = j;
  if (j.is_structured())
    for (auto it = out.begin(); it != out.end(); ++it) *it = mark_non_finite(*it);
  return out;
}

}  // namespace

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open (", std::strerror(errno), ")");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = parse_json(quote_python_non_finite(text.str()), path);
  decode_float_objects(j);
  return j;
}

void write_json_file(const std::string& path, const nlohmann::json& j) { write_file_atomic(path, j.dump(2) + "\n"); }

void write_model_config_file(const std::string& path, const nlohmann::json& j) {
  std::string text = mark_non_finite(j).dump(2) + "\n";
  const std::string mark = std::string("\"") + kNonFiniteMark;
  for (size_t at = text.find(mark); at != std::string::npos; at = text.find(mark, at)) {
    const size_t end = text.find('"', at + mark.size());
    text.replace(at, end + 1 - at, text.substr(at + mark.size(), end - at - mark.size()));
  }
  write_file_atomic(path, text);
}

}  // namespace hla
