// AdamW and Muon: parameter grouping, CPU reference updates, CUDA dispatch, state I/O.
#include "train/optim.h"

#include <Eigen/Dense>
#include <cmath>
#include <regex>
#include <set>
#include <sstream>

#include "tensor/dispatch.h"
#include "tensor/math.h"
#include "train/upload.h"
#if defined(HLA_CUDA) && __has_include("cuda/optim.h")
#include "cuda/optim.h"
#define HLA_CUDA_OPTIM 1
#endif

namespace hla {

// ---------------------------------------------------------------- CPU reference updates

namespace cpu {

// A gradient as an update reads it: times the clip factor at grad_scale (null: 1), as multi_scale_
// would have written it.
template <class T>
T scaled_gradient(T g, const double* grad_scale) {
  if (!grad_scale || *grad_scale == 1.0) return g;
  return *grad_scale == 0.0 ? T(0) : g * static_cast<T>(*grad_scale);
}

template <class T>
void adamw_update(T* const* param, const T* const* grad, T* const* m, T* const* v, const int64_t* n,
                  int count, const double* schedule, double beta1, double beta2, double eps, double weight_decay,
                  const double* grad_scale, bf16* const* compute_copy) {
  const double lr = schedule[0], bias_correction1 = schedule[1], bias_correction2 = schedule[2];
  const T decay = static_cast<T>(1.0 - lr * weight_decay);
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
  const T step_size = static_cast<T>(lr / bias_correction1);
  const T inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(bias_correction2));
  const T epsilon = static_cast<T>(eps);
  for (int t = 0; t < count; t++) {
    T *p = param[t], *mt = m[t], *vt = v[t];  // p, mt, vt: (n[t])
    const T* gt = grad[t];                    // gt: (n[t])
    bf16* copy = compute_copy ? compute_copy[t] : nullptr;  // copy: (n[t]) or null
    for (int64_t i = 0; i < n[t]; i++) {
      T g = scaled_gradient(gt[i], grad_scale);
      p[i] *= decay;                                  // decoupled weight decay
      mt[i] = b1 * mt[i] + (T(1) - b1) * g;           // first moment
      vt[i] = b2 * vt[i] + (T(1) - b2) * g * g;       // second moment
      T denom = std::sqrt(vt[i]) * inv_sqrt_bc2 + epsilon;  // sqrt(v / bc2) + eps
      p[i] -= step_size * mt[i] / denom;              // lr * (m / bc1) / denom
      if (copy) copy[i].bits = f32_to_bf16_bits(static_cast<float>(p[i]));
    }
  }
}

template <class T>
void muon_momentum(T* const* buf, T* const* update, const T* const* grad, const int64_t* n, int count,
                   double momentum, bool nesterov, const double* grad_scale) {
  const T mu = static_cast<T>(momentum);
  for (int t = 0; t < count; t++) {
    for (int64_t i = 0; i < n[t]; i++) {
      const T g = scaled_gradient(grad[t][i], grad_scale);
      buf[t][i] = mu * buf[t][i] + g;
      update[t][i] = nesterov ? g + mu * buf[t][i] : buf[t][i];
    }
  }
}

template <class T>
void newton_schulz(T* out, const T* g, int64_t batch, int64_t rows, int64_t cols, int steps) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  const bool tall = rows > cols;
  for (int64_t i = 0; i < batch; i++) {
    Eigen::Map<const Mat> G(g + i * rows * cols, rows, cols);  // G: (rows, cols), matrix i
    // X: (r, k) with r <= k, so X X^T is the smaller Gram matrix.
    Mat X = tall ? Mat(G.transpose()) : Mat(G);
    X /= static_cast<T>(X.norm() + 1e-7);  // Frobenius norm: every singular value <= 1
    for (int s = 0; s < steps; s++) {
      Mat A = X * X.transpose();                                   // (r, r)
      Mat B = static_cast<T>(b) * A + static_cast<T>(c) * (A * A);  // (r, r)
      X = (static_cast<T>(a) * X + B * X).eval();                  // (r, k)
    }
    Eigen::Map<Mat> O(out + i * rows * cols, rows, cols);  // O: (rows, cols)
    if (tall) O = X.transpose();
    else O = X;
  }
}

template <class T>
void muon_apply(T* const* param, const T* const* ortho, const int64_t* n, int count, const double* schedule,
                bf16* const* compute_copy) {
  const T d = static_cast<T>(schedule[0]), s = static_cast<T>(schedule[1]);  // decay, step
  for (int t = 0; t < count; t++) {
    bf16* copy = compute_copy ? compute_copy[t] : nullptr;  // copy: (n[t]) or null
    for (int64_t i = 0; i < n[t]; i++) {
      param[t][i] *= d;                   // decoupled weight decay
      param[t][i] -= s * ortho[t][i];     // lr * scale * O
      if (copy) copy[i].bits = f32_to_bf16_bits(static_cast<float>(param[t][i]));
    }
  }
}

#define HLA_INSTANTIATE_OPTIM(T)                                                                  \
  template void adamw_update<T>(T* const*, const T* const*, T* const*, T* const*, const int64_t*, \
                                int, const double*, double, double, double, double, const double*, \
                                bf16* const*);                                                    \
  template void muon_momentum<T>(T* const*, T* const*, const T* const*, const int64_t*, int,      \
                                 double, bool, const double*);                                    \
  template void newton_schulz<T>(T*, const T*, int64_t, int64_t, int64_t, int);                   \
  template void muon_apply<T>(T* const*, const T* const*, const int64_t*, int, const double*, bf16* const*);
HLA_INSTANTIATE_OPTIM(float)
HLA_INSTANTIATE_OPTIM(double)
#undef HLA_INSTANTIATE_OPTIM

}  // namespace cpu

// ---------------------------------------------------------------- configuration and grouping

void OptimConfig::validate() const {
  HLA_CHECK_INPUT(name == "adamw" || name == "muon", "[optim] name: '", name,
            "' is not an optimizer (adamw | muon)");
  HLA_CHECK_INPUT(lr > 0, "[optim] lr must be > 0, got ", lr);
  HLA_CHECK_INPUT(adam_lr >= 0, "[optim] adam_lr must be >= 0 (0 = lr), got ", adam_lr);
  HLA_CHECK_INPUT(beta1 >= 0 && beta1 < 1, "[optim] beta1 must be in [0, 1), got ", beta1);
  HLA_CHECK_INPUT(beta2 >= 0 && beta2 < 1, "[optim] beta2 must be in [0, 1), got ", beta2);
  HLA_CHECK_INPUT(eps > 0, "[optim] eps must be > 0, got ", eps);
  HLA_CHECK_INPUT(weight_decay >= 0, "[optim] weight_decay must be >= 0, got ", weight_decay);
  HLA_CHECK_INPUT(adam_weight_decay >= 0, "[optim] adam_weight_decay must be >= 0, got ",
            adam_weight_decay);
  HLA_CHECK_INPUT(momentum >= 0 && momentum < 1, "[optim] momentum must be in [0, 1), got ", momentum);
  HLA_CHECK_INPUT(ns_steps >= 1 && ns_steps <= 20, "[optim] ns_steps must be in [1, 20], got ", ns_steps);
  HLA_CHECK_INPUT(muon_scale == "rms" || muon_scale == "shape", "[optim] muon_scale: '", muon_scale,
            "' is not a scale mode (rms | shape)");
}

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "model.layers.0.attn_norm.weight" -> "attn_norm"
std::string module_of(const std::string& name) {
  size_t dot = name.rfind('.');
  if (dot == std::string::npos) return "";
  size_t prev = name.rfind('.', dot - 1);
  return name.substr(prev == std::string::npos ? 0 : prev + 1,
                     dot - (prev == std::string::npos ? 0 : prev + 1));
}

// "model.layers.12.attn.q_proj.weight" -> "model.layers.*.attn.q_proj.weight"
std::string fold_layer_index(const std::string& name) {
  static const std::regex layer_index(R"(\.\d+\.)");
  return std::regex_replace(name, layer_index, ".*.");
}

const char* rule_name(UpdateRule r) { return r == UpdateRule::Muon ? "muon" : "adamw"; }

}  // namespace

bool no_weight_decay(const std::string& name, const Shape& shape) {
  bool weight_tensor = shape.size() >= 2 && ends_with(name, ".weight");
  return !weight_tensor || module_of(name).find("norm") != std::string::npos;
}

bool is_embedding_or_head(const std::string& name) {
  return name.find("embed") != std::string::npos || name.find("lm_head") != std::string::npos;
}

double muon_update_scale(const std::string& mode, int64_t rows, int64_t cols) {
  if (mode == "shape") return std::sqrt(std::max(1.0, double(rows) / double(cols)));
  return 0.2 * std::sqrt(double(std::max(rows, cols)));
}

namespace {

std::vector<const char*> state_suffixes(UpdateRule rule) {
  if (rule == UpdateRule::Muon) return {"momentum_buffer"};
  return {"exp_avg", "exp_avg_sq"};
}

}  // namespace

Optimizer::Optimizer(const ParameterList& params, const OptimConfig& config, const std::vector<bool>& updates)
    : config_(config), updates_(updates.empty() ? std::vector<bool>(params.size(), true) : updates) {
  config_.validate();
  HLA_CHECK(updates_.size() == params.size(), "optimizer: ", updates_.size(), " update flags for ", params.size(),
            " parameters");
  bool muon = config_.name == "muon";
  double adam_lr_scale = muon && config_.adam_lr > 0 ? config_.adam_lr / config_.lr : 1.0;
  std::set<std::string> seen;
  for (const NamedParameter& p : params) {
    HLA_CHECK(seen.insert(p.name).second, "optimizer: parameter '", p.name, "' appears twice");
    HLA_CHECK(p.var.requires_grad(), "optimizer: parameter '", p.name, "' does not require grad");
    HLA_CHECK(is_float(p.var.dtype()) && p.var.dtype() != DType::BF16, "optimizer: parameter '",
              p.name, "' is ", dtype_name(p.var.dtype()), "; master weights must be F32 or F64");
    ParamPlan plan;
    plan.name = p.name;
    plan.var = p.var;
    plan.compute_copy = p.compute_copy;
    plan.decay = !no_weight_decay(p.name, p.var.shape());
    bool matrix = p.var.dim() == 2 && plan.decay && !is_embedding_or_head(p.name);
    plan.rule = muon && matrix ? UpdateRule::Muon : UpdateRule::AdamW;
    bool adam_side = muon && plan.rule == UpdateRule::AdamW;
    plan.lr_scale = adam_side ? adam_lr_scale : 1.0;
    plan.weight_decay = !plan.decay ? 0.0 : adam_side ? config_.adam_weight_decay
                                                      : config_.weight_decay;
    Device dev = p.var.device();
    DType dt = p.var.dtype();
    std::vector<std::pair<std::string, Tensor>> state;
    if (updates_[plan_.size()])
      for (const char* suffix : state_suffixes(plan.rule)) state.emplace_back(suffix, Tensor::zeros(p.var.shape(), dt, dev));
    plan_.push_back(plan);
    state_.push_back(std::move(state));
  }
  for (size_t i = 0; i < plan_.size(); i++) {
    const ParamPlan& p = plan_[i];
    UpdateGroup key;
    key.rule = p.rule;
    key.lr_scale = p.lr_scale;
    key.weight_decay = p.weight_decay;
    key.device = p.var.device();
    key.dtype = p.var.dtype();
    if (p.rule == UpdateRule::Muon) key.rows = p.var.size(0), key.cols = p.var.size(1);
    auto same = [&](const UpdateGroup& g) {
      return g.rule == key.rule && g.lr_scale == key.lr_scale && g.weight_decay == key.weight_decay &&
             g.device == key.device && g.dtype == key.dtype && g.rows == key.rows && g.cols == key.cols;
    };
    auto it = std::find_if(groups_.begin(), groups_.end(), same);
    if (it == groups_.end()) it = groups_.insert(groups_.end(), key);
    it->members.push_back(i);
  }
  if (!groups_.empty()) {
    for (const UpdateGroup& g : groups_)
      HLA_CHECK(g.device == groups_[0].device, "optimizer: parameters on two devices ('", plan_[g.members[0]].name,
                "' and '", plan_[groups_[0].members[0]].name, "')");
    schedule_ = Tensor::zeros({static_cast<int64_t>(groups_.size()), kScheduleValues}, DType::F64, groups_[0].device);
  }
}

std::string Optimizer::describe() const {
  struct Group {
    int64_t tensors = 0, numel = 0;
    std::vector<std::string> names;  // folded, first appearance order
  };
  std::map<std::string, Group> groups;
  std::vector<std::string> order;
  for (const ParamPlan& p : plan_) {
    std::ostringstream key;
    key << rule_name(p.rule) << "  lr " << config_.lr * p.lr_scale << "  wd " << p.weight_decay;
    if (!groups.count(key.str())) order.push_back(key.str());
    Group& g = groups[key.str()];
    g.tensors++;
    g.numel += p.var.numel();
    std::string folded = fold_layer_index(p.name);
    if (std::find(g.names.begin(), g.names.end(), folded) == g.names.end()) g.names.push_back(folded);
  }
  std::ostringstream os;
  for (const std::string& key : order) {
    const Group& g = groups[key];
    os << "  " << key << "  (" << g.tensors << " tensors, " << g.numel << " params):";
    for (const std::string& n : g.names) os << " " << n;
    os << "\n";
  }
  return os.str();
}

// ---------------------------------------------------------------- updates

void Optimizer::zero_grad() {
  for (ParamPlan& p : plan_) p.var.zero_grad();
}

void Optimizer::step(double lr_factor) {
  stage(lr_factor);
  apply();
}

void Optimizer::stage(double lr_factor) {
  step_++;
  if (groups_.empty()) return;
  const double lr = config_.lr * lr_factor;
  const double bc1 = 1.0 - std::pow(config_.beta1, double(step_));
  const double bc2 = 1.0 - std::pow(config_.beta2, double(step_));
  std::vector<double> values;  // (groups, kScheduleValues)
  for (const UpdateGroup& group : groups_) {
    if (group.rule == UpdateRule::Muon) {
      const double decay = 1.0 - lr * group.weight_decay;
      const double step = lr * muon_update_scale(config_.muon_scale, group.rows, group.cols);
      values.insert(values.end(), {decay, step, 0.0});
    } else {
      values.insert(values.end(), {lr * group.lr_scale, bc1, bc2});
    }
  }
  upload_f64_async(schedule_, values);
}

void Optimizer::apply(const Tensor& grad_scale) {
  NoGradGuard no_grad;
  const double* scale = nullptr;
  if (grad_scale.defined()) {
    HLA_CHECK(grad_scale.dtype() == DType::F64 && grad_scale.numel() == 1 &&
                  (groups_.empty() || grad_scale.device() == groups_[0].device),
              "optimizer: grad_scale must be one F64 value on the parameters' device, got ", grad_scale.str());
    scale = grad_scale.data<double>();
  }
  std::vector<MuonPending> muon;
  for (size_t g = 0; g < groups_.size(); g++) {
    const UpdateGroup& group = groups_[g];
    std::vector<size_t> live;  // unused this step: no update, no decay
    for (size_t i : group.members)
      if (updates_[i] && plan_[i].var.grad().defined()) live.push_back(i);
    if (live.empty()) continue;
    const Tensor schedule = schedule_.slice0(int64_t(g), int64_t(g) + 1);  // (1, kScheduleValues)
    if (group.rule == UpdateRule::Muon) muon.push_back({&group, live, schedule});
    else adamw_step(group, live, schedule, scale);
  }
  muon_steps(muon, scale);
}

namespace {

// Pointers of T to one tensor per live parameter, as the update functions take them.
template <class T, class Get>
std::vector<T*> column(const std::vector<size_t>& live, Get get) {
  std::vector<T*> out;
  for (size_t i : live) out.push_back(get(i).template data<std::remove_const_t<T>>());
  return out;
}

// Each live parameter's compute copy, null where it has none (nn/module.h).
std::vector<bf16*> compute_copies(const std::vector<ParamPlan>& plan, const std::vector<size_t>& live) {
  std::vector<bf16*> out;
  for (size_t i : live) {
    Tensor copy = plan[i].compute_copy;  // a handle on the copy's storage
    out.push_back(copy.defined() ? copy.data<bf16>() : nullptr);
  }
  return out;
}

// Pointers to matrix k of a (count, rows, cols) batch, k < count.
template <class T>
std::vector<T*> matrices(Tensor& batch) {
  std::vector<T*> out;
  const int64_t stride = batch.numel() / batch.size(0);
  for (int64_t k = 0; k < batch.size(0); k++) out.push_back(batch.data<std::remove_const_t<T>>() + k * stride);
  return out;
}

}  // namespace

void Optimizer::adamw_step(const UpdateGroup& group, const std::vector<size_t>& live, const Tensor& schedule,
                           const double* grad_scale) {
  auto param = [&](size_t i) -> Tensor& { return plan_[i].var.mutable_value(); };
  auto grad = [&](size_t i) -> const Tensor& { return plan_[i].var.grad(); };
  auto m = [&](size_t i) -> Tensor& { return state_[i][0].second; };
  auto v = [&](size_t i) -> Tensor& { return state_[i][1].second; };
  std::vector<int64_t> n;
  for (size_t i : live) n.push_back(plan_[i].var.numel());
  const int count = static_cast<int>(live.size());
  const double wd = group.weight_decay;
  const std::vector<bf16*> copies = compute_copies(plan_, live);
  if (group.device == Device::CUDA) {
#ifdef HLA_CUDA_OPTIM
    cuda::adamw_update(column<float>(live, param).data(), column<const float>(live, grad).data(),
                       column<float>(live, m).data(), column<float>(live, v).data(), n.data(), count,
                       schedule.data<double>(), float(config_.beta1), float(config_.beta2), float(config_.eps),
                       float(wd), grad_scale, copies.data());
    return;
#else
    fail("optimizer: parameter '", plan_[live[0]].name, "' is on CUDA but this build has no cuda/optim.h");
#endif
  }
  dispatch_float(group.dtype, "adamw", [&](auto tag) {
    using T = decltype(tag);
    cpu::adamw_update<T>(column<T>(live, param).data(), column<const T>(live, grad).data(),
                         column<T>(live, m).data(), column<T>(live, v).data(), n.data(), count,
                         schedule.data<double>(), config_.beta1, config_.beta2, config_.eps, wd, grad_scale,
                         copies.data());
  });
}

void Optimizer::muon_steps(const std::vector<MuonPending>& pending, const double* grad_scale) {
  // Passes 1-3 of `groups` together: their momentum updates, one Newton-Schulz call (on CUDA
  // their products share launches), their steps.
  auto run = [&](const std::vector<const MuonPending*>& groups) {
    std::vector<Tensor> updates, orthos;  // (count, rows, cols) each
    for (const MuonPending* p : groups) {
      updates.push_back(muon_momentum(*p, grad_scale));
      orthos.push_back(Tensor::empty(updates.back().shape(), updates.back().dtype(), updates.back().device()));
    }
    if (groups[0]->group->device == Device::CUDA) {
#ifdef HLA_CUDA_OPTIM
      std::vector<cuda::NewtonSchulzBatch> batches;
      for (size_t i = 0; i < groups.size(); i++)
        batches.push_back({orthos[i].data<float>(), updates[i].data<float>(), updates[i].size(0),
                           groups[i]->group->rows, groups[i]->group->cols});
      cuda::newton_schulz(batches.data(), static_cast<int>(batches.size()), config_.ns_steps);
#endif
    } else {
      for (size_t i = 0; i < groups.size(); i++)
        dispatch_float(groups[i]->group->dtype, "muon", [&](auto tag) {
          using T = decltype(tag);
          cpu::newton_schulz<T>(orthos[i].data<T>(), updates[i].data<T>(), updates[i].size(0),
                                groups[i]->group->rows, groups[i]->group->cols, config_.ns_steps);
        });
    }
    for (size_t i = 0; i < groups.size(); i++) muon_apply_step(*groups[i], orthos[i]);
  };
  std::vector<const MuonPending*> together;
  for (const MuonPending& p : pending) {
    bool shares = false;
#ifdef HLA_CUDA_OPTIM
    shares = p.group->device == Device::CUDA && p.group->rows <= cuda::kNewtonSchulzSmallSide &&
             p.group->cols <= cuda::kNewtonSchulzSmallSide;
#endif
    if (shares) together.push_back(&p);
    else run({&p});  // its buffers are free again before the next group's
  }
  if (!together.empty()) run(together);
}

Tensor Optimizer::muon_momentum(const MuonPending& p, const double* grad_scale) {
  const UpdateGroup& group = *p.group;
  const int64_t count = static_cast<int64_t>(p.live.size());
  Tensor update = Tensor::empty({count, group.rows, group.cols}, group.dtype, group.device);  // (count, rows, cols)
  auto grad = [&](size_t i) -> const Tensor& { return plan_[i].var.grad(); };
  auto buf = [&](size_t i) -> Tensor& { return state_[i][0].second; };
  const std::vector<int64_t> n(count, group.rows * group.cols);
  if (group.device == Device::CUDA) {
#ifdef HLA_CUDA_OPTIM
    cuda::muon_momentum(column<float>(p.live, buf).data(), matrices<float>(update).data(),
                        column<const float>(p.live, grad).data(), n.data(), int(count), float(config_.momentum),
                        config_.nesterov, grad_scale);
    return update;
#else
    fail("optimizer: parameter '", plan_[p.live[0]].name, "' is on CUDA but this build has no cuda/optim.h");
#endif
  }
  dispatch_float(group.dtype, "muon", [&](auto tag) {
    using T = decltype(tag);
    cpu::muon_momentum<T>(column<T>(p.live, buf).data(), matrices<T>(update).data(),
                          column<const T>(p.live, grad).data(), n.data(), int(count), config_.momentum,
                          config_.nesterov, grad_scale);
  });
  return update;
}

void Optimizer::muon_apply_step(const MuonPending& p, Tensor& ortho) {
  auto param = [&](size_t i) -> Tensor& { return plan_[i].var.mutable_value(); };
  const int64_t count = ortho.size(0);
  const std::vector<int64_t> n(count, p.group->rows * p.group->cols);
  const std::vector<bf16*> copies = compute_copies(plan_, p.live);
  if (p.group->device == Device::CUDA) {
#ifdef HLA_CUDA_OPTIM
    cuda::muon_apply(column<float>(p.live, param).data(), matrices<const float>(ortho).data(), n.data(), int(count),
                     p.schedule.data<double>(), copies.data());
    return;
#endif
  }
  dispatch_float(p.group->dtype, "muon", [&](auto tag) {
    using T = decltype(tag);
    cpu::muon_apply<T>(column<T>(p.live, param).data(), matrices<const T>(ortho).data(), n.data(), int(count),
                       p.schedule.data<double>(), copies.data());
  });
}

// ---------------------------------------------------------------- state I/O

NamedTensors Optimizer::state() const {
  NamedTensors out;
  for (size_t i = 0; i < plan_.size(); i++)
    for (const auto& [suffix, t] : state_[i]) out.emplace_back(plan_[i].name + "." + suffix, t.to(Device::CPU));
  return out;
}

std::vector<std::string> Optimizer::state_names(size_t i) const {
  std::vector<std::string> names;
  for (const char* suffix : state_suffixes(plan_[i].rule)) names.push_back(plan_[i].name + "." + suffix);
  return names;
}

std::map<std::string, std::string> Optimizer::state_metadata() const {
  return {{"optimizer", config_.name}, {"step", std::to_string(step_)}};
}

namespace {

// exp_avg_sq is a running mean of squared gradients: a negative entry can only come from a
// damaged file, and would turn the first update after resuming into NaN. Refused at load,
// naming the tensor and the first bad element (flat index).
void check_second_moment(const std::string& path, const std::string& name, const Tensor& saved) {
  const std::vector<double> values = saved.to_f64_vector();
  for (size_t i = 0; i < values.size(); i++)
    if (values[i] < 0)
      fail(path, ": tensor '", name, "' holds ", values[i], " at index ", i, " of ", values.size(),
           ": a second moment (a mean of squares) is never negative, the file is damaged");
}

}  // namespace

void Optimizer::load_state(const SafetensorsFile& file) {
  auto meta = [&](const std::string& key) {
    auto it = file.metadata.find(key);
    HLA_CHECK(it != file.metadata.end(), file.path, ": metadata has no '", key, "'");
    return it->second;
  };
  HLA_CHECK(meta("optimizer") == config_.name, file.path, ": holds the state of optimizer '",
            meta("optimizer"), "' but this run uses '", config_.name, "'");
  std::set<std::string> expected;
  for (size_t i = 0; i < plan_.size(); i++) {
    for (const std::string& name : state_names(i)) expected.insert(name);
    for (auto& [suffix, t] : state_[i]) {
      std::string name = plan_[i].name + "." + suffix;
      const Tensor& saved = file.get(name);
      HLA_CHECK(saved.shape() == t.shape() && saved.dtype() == t.dtype(), file.path, ": tensor '",
                name, "' is ", saved.str(), " but the optimizer expects ", t.str());
      if (suffix == "exp_avg_sq") check_second_moment(file.path, name, saved);
      t.copy_(saved);
    }
  }
  for (const auto& [name, t] : file.tensors)
    HLA_CHECK(expected.count(name), file.path, ": tensor '", name,
              "' belongs to no parameter of this model under this optimizer");
  try {
    step_ = std::stoll(meta("step"));
  } catch (const std::logic_error&) {
    fail(file.path, ": metadata 'step' is not an integer: '", meta("step"), "'");
  }
}

}  // namespace hla
