// Seeded, named parameter creation (see params.h).
#include "nn/layers/params.h"

#include "nn/ops/cast.h"
#include "tensor/random.h"

namespace hla {

uint64_t ParamStore::seed_for(const std::string& name) const {
  const std::string full_name = prefix_ + name;
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the name, mixed with the model seed
  for (unsigned char c : full_name) h = (h ^ c) * 1099511628211ull;
  return splitmix64(h ^ splitmix64(seed_));
}

Var ParamStore::add(const std::string& name, Tensor value) {
  std::string full = prefix_ + name;
  for (const auto& p : params_)
    HLA_CHECK(p.name != full, "parameter '", full, "' created twice");
  DType master = compute_dtype_ == DType::F64 ? DType::F64 : DType::F32;  // fp32 master weights
  Var v(value.to(master).to(device_), true);
  params_.push_back({full, v});
  return v;
}

Var ParamStore::normal(const std::string& name, const Shape& shape, double std) {
  double s = std < 0 ? init_std_ : std;
  return add(name, Tensor::randn(shape, seed_for(name), s, DType::F32));
}

Var ParamStore::constant(const std::string& name, const Shape& shape, double value) {
  return add(name, Tensor::full(shape, value, DType::F32));
}

Var ParamStore::uniform(const std::string& name, const Shape& shape, double lo, double hi) {
  return add(name, Tensor::uniform(shape, seed_for(name), lo, hi, DType::F32));
}

Var ParamStore::from_tensor(const std::string& name, const Tensor& values) { return add(name, values); }

Var ParamStore::use(const Var& param) const {
  if (param.dtype() == compute_dtype_) return param;
  return cast(param, compute_dtype_);
}

}  // namespace hla
