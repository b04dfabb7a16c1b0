// Model weights in safetensors and JSON files, written whole or not at all (see weights.h).
#include "nn/weights.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

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

void load_model_weights(const std::string& dir, const ParameterList& params) {
  std::string path = dir + "/" + kModelWeightsFile;
  HLA_CHECK(std::filesystem::exists(path), "checkpoint ", dir, ": no ", kModelWeightsFile,
            " (is it a checkpoint directory?)");
  SafetensorsFile file = load_safetensors(path);
  std::set<std::string> names;
  for (const NamedParameter& p : params) {
    names.insert(p.name);
    const Tensor& saved = file.get(p.name);
    const Tensor& value = p.var.value();
    HLA_CHECK(saved.shape() == value.shape(), path, ": tensor '", p.name, "' has shape ",
              shape_str(saved.shape()), " but the model expects ", shape_str(value.shape()));
    HLA_CHECK(saved.dtype() == value.dtype(), path, ": tensor '", p.name, "' is ",
              dtype_name(saved.dtype()), " but the model expects ", dtype_name(value.dtype()));
    check_finite(path, p.name, saved);
  }
  for (const auto& [name, t] : file.tensors)
    HLA_CHECK(names.count(name), path, ": tensor '", name, "' is not a parameter of this model");
  for (const NamedParameter& p : params) {
    Var v = p.var;
    v.mutable_value().copy_(file.get(p.name));
  }
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open (", std::strerror(errno), ")");
  std::stringstream text;
  text << in.rdbuf();
  return parse_json(text.str(), path);
}

void write_json_file(const std::string& path, const nlohmann::json& j) { write_file_atomic(path, j.dump(2) + "\n"); }

}  // namespace hla
