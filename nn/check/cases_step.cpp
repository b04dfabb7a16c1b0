// Check case (nn/check/registry.h) of the training step's multi-tensor ops (nn/ops/grad_norm.h):
// gpu mode runs multi_sq_norm over five tensors of awkward sizes (one of exactly three chunks,
// one of a single element, one past a chunk by one) and multi_scale_ of copies of them by a
// fixed factor, on CUDA against the float64 CPU reference. No gradients: these ops run on
// gradients, after the backward.
#include <string>

#include "nn/check/registry.h"
#include "nn/ops/grad_norm.h"

namespace hla::check {
namespace {

using Vars = std::vector<Var>;

void add_multi_sq_norm_cases() {
  const std::vector<Shape> shapes = {{10007}, {3, 8192}, {1}, {333, 129}, {8193}};
  Case c = gpu_case(
      "grad_norm", "multi_sq_norm + multi_scale_ 5 tensors", named_kernel("multi-tensor chunks"),
      [shapes](uint64_t seed) {
        Inputs in;
        for (size_t i = 0; i < shapes.size(); i++)
          in.push_back({"g" + std::to_string(i), randn64(shapes[i], seed + i, 0.5 + 0.25 * double(i)), false});
        return in;
      },
      [](const Vars& v) {
        std::vector<Tensor> xs, scaled;
        for (const Var& x : v) {
          xs.push_back(x.value());
          scaled.push_back(x.value().clone());
        }
        const Device device = xs.front().device();
        multi_scale_(scaled, Tensor::full({1}, 0.37, DType::F64).to(device));
        Vars out = {Var(multi_sq_norm(xs, device))};
        for (const Tensor& s : scaled) out.push_back(Var(s));
        return out;
      });
  c.outputs = {"sums", "scaled0", "scaled1", "scaled2", "scaled3", "scaled4"};
  add_case(std::move(c));
}

const Registrar registered{add_multi_sq_norm_cases};

}  // namespace
}  // namespace hla::check
