// The case list and the helpers case files share (see registry.h).
#include "nn/check/registry.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "nn/ops/attention.h"
#include "tensor/math.h"

namespace hla::check {
namespace {

std::vector<Case>& registry() {
  static std::vector<Case> all;
  return all;
}

void validate(const std::vector<Case>& all) {
  for (unsigned mode : {kGrad, kGpu, kPerf}) {
    std::set<std::string> names;
    for (const Case& c : all) {
      if (!(c.modes & mode)) continue;
      HLA_CHECK(!c.group.empty() && !c.name.empty() && c.inputs && c.op, "check registry: case '", c.name,
                "' of group '", c.group, "' needs a group, a name, an input maker and an op");
      HLA_CHECK(names.insert(c.name).second, "check registry: two cases of mode ", mode, " are named '", c.name, "'");
      HLA_CHECK(mode != kPerf || c.perf.fwd_flops > 0 || c.perf.fwd_bytes > 0, "check registry: perf case '", c.name,
                "' has neither flops nor bytes");
    }
  }
}

}  // namespace

void add_case(Case c) { registry().push_back(std::move(c)); }

std::vector<const Case*> cases(Mode mode, const std::vector<std::string>& patterns) {
  static const bool validated = (validate(registry()), true);
  (void)validated;
  auto matches = [&patterns](const Case& c) {
    for (const std::string& p : patterns)
      if (c.name.find(p) != std::string::npos || c.group.find(p) != std::string::npos) return true;
    return patterns.empty();
  };
  std::vector<const Case*> selected;
  for (const Case& c : registry())
    if ((c.modes & mode) && matches(c)) selected.push_back(&c);
  std::stable_sort(selected.begin(), selected.end(), [](const Case* a, const Case* b) { return a->group < b->group; });
  return selected;
}

namespace {

Case make_case(std::string group, std::string name, unsigned modes, MakeInputs inputs, OpFn op, KernelLabel kernel) {
  Case c;
  c.group = std::move(group);
  c.name = std::move(name);
  c.modes = modes;
  c.inputs = std::move(inputs);
  c.op = std::move(op);
  c.kernel = std::move(kernel);
  return c;
}

}  // namespace

Case grad_case(std::string group, std::string name, uint64_t seed, MakeInputs inputs, OpFn op) {
  Case c = make_case(std::move(group), std::move(name), kGrad, std::move(inputs), std::move(op), nullptr);
  c.seed = seed;
  return c;
}

Case gpu_case(std::string group, std::string name, KernelLabel kernel, MakeInputs inputs, OpFn op) {
  return make_case(std::move(group), std::move(name), kGpu, std::move(inputs), std::move(op), std::move(kernel));
}

Case perf_case(std::string group, std::string name, KernelLabel kernel, MakeInputs inputs, OpFn op, Perf perf) {
  Case c = make_case(std::move(group), std::move(name), kPerf, std::move(inputs), std::move(op), std::move(kernel));
  c.perf = std::move(perf);
  return c;
}

Tensor randn64(const Shape& shape, uint64_t seed, double std, double shift) {
  Tensor t = Tensor::randn(shape, seed, std, DType::F64);
  if (shift != 0.0) {
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); i++) p[i] += shift;
  }
  return t;
}

Tensor uniform64(const Shape& shape, uint64_t seed, double lo, double hi) {
  return Tensor::uniform(shape, seed, lo, hi, DType::F64);
}

Tensor map64(Tensor t, double (*f)(double)) {
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); i++) p[i] = f(p[i]);
  return t;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double logsigmoid(double x) { return -std::log1p(std::exp(-x)); }

Tensor log_gate(const Shape& shape, uint64_t seed, double shift) {
  return map64(randn64(shape, seed, 1.0, shift), logsigmoid);
}

Tensor packed_doc_start(int64_t B, const std::vector<int64_t>& lengths) {
  std::vector<int64_t> cu{0};
  for (int64_t b = 0; b < B; b++)
    for (int64_t len : lengths) cu.push_back(cu.back() + len);
  return document_starts(cu, B, B > 0 ? cu.back() / B : 0);
}

Tensor unit_rows(Tensor t) {
  const int64_t w = t.size(-1);
  double* p = t.data<double>();
  for (int64_t r = 0; r < t.numel() / w; r++) {
    double ss = 0;
    for (int64_t i = 0; i < w; i++) ss += p[r * w + i] * p[r * w + i];
    for (int64_t i = 0; i < w; i++) p[r * w + i] /= std::sqrt(ss);
  }
  return t;
}

KernelLabel named_kernel(const std::string& name) {
  return [name](DType) { return name; };
}

std::string dims_label(const std::vector<std::pair<const char*, int64_t>>& dims) {
  std::string s;
  for (const auto& [letter, size] : dims) s += (s.empty() ? "" : " ") + std::string(letter) + std::to_string(size);
  return s;
}

Tensor perf_input(PerfPool pool, int index, const Shape& shape, double std) {
  constexpr int64_t kLargest = int64_t(4) * 4096 * 16 * 128, kSpread = 4096, kViews = 8;
  HLA_CHECK(index >= 0 && index < kViews && shape_numel(shape) <= kLargest, "perf_input: view ", index, " of shape ",
            shape_str(shape), " does not fit a pool of ", kLargest, " elements and ", kViews, " views");
  static const Tensor pools[] = {
      Tensor::randn({kLargest + kViews * kSpread}, 1, 1.0, DType::BF16, Device::CUDA),
      Tensor::uniform({kLargest + kViews * kSpread}, 2, -1.0, -0.01, DType::BF16, Device::CUDA),
      Tensor::uniform({kLargest + kViews * kSpread}, 3, 0.0, 1.0, DType::BF16, Device::CUDA),
  };
  const Tensor& p = pools[static_cast<int>(pool)];
  Tensor view = p.slice0(index * kSpread, index * kSpread + shape_numel(shape)).reshape(shape);
  return std == 1.0 ? view : scale(view, std);
}

}  // namespace hla::check
