// ParamStore: creates a model's parameters under fla names, with seeded initial values.
// Each parameter's values depend only on (seed, name), so adding a layer never changes the
// initial weights of another. A Scope pushes a name prefix ("model.layers.3.attn.").
// The distributions are PyTorch's (nn.init.normal_, uniform_, xavier_uniform_, orthogonal_);
// which parameter gets which, as fla initialises it, is the table in nn/layers/common.h.
#pragma once
#include <string>
#include <unordered_map>

#include "nn/module.h"

namespace hla {

class ParamStore {
 public:
  ParamStore(uint64_t seed, double init_std, Device device, DType compute_dtype)
      : seed_(seed), init_std_(init_std), device_(device), compute_dtype_(compute_dtype) {}

  Var normal(const std::string& name, const Shape& shape, double std = -1);  // std < 0: init_std
  Var constant(const std::string& name, const Shape& shape, double value);
  Var uniform(const std::string& name, const Shape& shape, double lo, double hi);
  // U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)), shape (fan_out, fan_in).
  Var xavier_uniform(const std::string& name, const Shape& shape, double gain);
  // gain * Q, Q Haar-random with orthonormal columns (rows >= cols) or rows (rows < cols):
  // the Q of the QR decomposition of a standard normal matrix, columns signed by diag(R).
  Var orthogonal(const std::string& name, const Shape& shape, double gain);
  Var from_tensor(const std::string& name, const Tensor& values);  // a CPU F64/F32 tensor

  // The parameter as the forward pass uses it: in the compute dtype when that differs from the
  // fp32 master weight (bf16 on the GPU), so the gradient flows back in fp32. A parameter of this
  // store reads its compute copy (made here, kept current by every writer: nn/module.h), no cast
  // per forward; any other Var (one computed from parameters) is cast.
  Var use(const Var& param) const;

  ParameterList& parameters() { return params_; }
  Device device() const { return device_; }
  DType compute_dtype() const { return compute_dtype_; }
  uint64_t seed_for(const std::string& name) const;  // from the scoped (full) name

  class Scope {
   public:
    Scope(ParamStore& store, const std::string& part) : store_(store), saved_(store.prefix_) {
      store_.prefix_ += part;
    }
    ~Scope() { store_.prefix_ = saved_; }

   private:
    ParamStore& store_;
    std::string saved_;
  };

 private:
  Var add(const std::string& name, Tensor value);
  uint64_t seed_;
  double init_std_;
  Device device_;
  DType compute_dtype_;
  std::string prefix_;
  ParameterList params_;
  std::unordered_map<const VarImpl*, size_t> index_;  // a parameter's place in params_
};

}  // namespace hla
