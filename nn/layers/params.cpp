// Seeded, named parameter creation (see params.h).
#include "nn/layers/params.h"

#include <Eigen/Dense>
#include <cmath>

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
  Tensor compute_copy = compute_dtype_ == master ? Tensor() : v.value().to(compute_dtype_);
  index_[v.impl()] = params_.size();
  params_.push_back({full, v, compute_copy});
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

Var ParamStore::xavier_uniform(const std::string& name, const Shape& shape, double gain) {
  HLA_CHECK(shape.size() == 2, "xavier_uniform: parameter '", prefix_ + name, "' must be a matrix, got ", shape_str(shape));
  double bound = gain * std::sqrt(6.0 / double(shape[0] + shape[1]));
  return uniform(name, shape, -bound, bound);
}

Var ParamStore::orthogonal(const std::string& name, const Shape& shape, double gain) {
  HLA_CHECK(shape.size() == 2, "orthogonal: parameter '", prefix_ + name, "' must be a matrix, got ", shape_str(shape));
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t rows = shape[0], cols = shape[1];
  const bool wide = rows < cols;
  const int64_t m = wide ? cols : rows, n = wide ? rows : cols;  // a (m, n) tall matrix, m >= n
  // pass 1: G (m, n) standard normal, seeded by name
  Tensor normal01 = Tensor::randn({m, n}, seed_for(name), 1.0, DType::F64);
  std::vector<double> g = normal01.to_f64_vector();
  Eigen::Map<const Mat> G(g.data(), m, n);
  // pass 2: G = Q R; Q (m, n) has orthonormal columns; sign(diag(R)) makes Q Haar-distributed
  Eigen::HouseholderQR<Mat> qr(G);
  Mat Q = qr.householderQ() * Mat::Identity(m, n);
  Mat R = qr.matrixQR().topRows(n).template triangularView<Eigen::Upper>();
  for (int64_t j = 0; j < n; j++)
    if (R(j, j) < 0) Q.col(j) *= -1.0;
  // pass 3: the (rows, cols) parameter, transposed back when wide, times gain
  Mat W = wide ? Mat(Q.transpose()) : Q;
  W *= gain;
  std::vector<double> w(W.data(), W.data() + W.size());
  return add(name, Tensor::from_f64(w, shape, DType::F64));
}

Var ParamStore::from_tensor(const std::string& name, const Tensor& values) { return add(name, values); }

Var ParamStore::use(const Var& param) const {
  if (param.dtype() == compute_dtype_) return param;
  const auto it = index_.find(param.impl());
  if (it == index_.end() || !params_[it->second].compute_copy.defined()) return cast(param, compute_dtype_);
  return cast_made(param, params_[it->second].compute_copy);
}

}  // namespace hla
