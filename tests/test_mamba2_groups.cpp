// Mamba-2 with n_groups > 1 (fla's Mamba2 layout): the G groups of B and C are independent
// blocks, so a layer of G groups equals the sum of G one-group layers, each holding its group's
// slice of every parameter. The test builds both and compares; it fails if any row of in_proj,
// conv1d, the per-head parameters, the grouped norm or out_proj's columns is taken from the
// wrong place, or if head h reads any group but h / (heads / G).
#include <doctest/doctest.h>

#include <cmath>

#include "nn/layers/mixers.h"
#include "nn/layers/params.h"
#include "tensor/random.h"

using namespace hla;

namespace {

ModelConfig mamba2(double expand_v, int groups, bool norm_before_gate) {
  ModelConfig c;
  c.model_type = "mamba2";
  c.hidden_size = 16;
  c.num_hidden_layers = 1;
  c.expand_v = expand_v;
  c.head_dim = 4;
  c.state_size = 3;
  c.conv_size = 4;
  c.chunk_size = 4;
  c.n_groups = groups;
  c.norm_before_gate = norm_before_gate;
  c.validate("mamba2 test");
  return c;
}

// The parameter's tensor (it shares the parameter's storage: writing it sets the parameter).
Tensor param(ParamStore& store, const std::string& name) {
  for (NamedParameter& p : store.parameters())
    if (p.name == name) return p.var.value();
  FAIL("no parameter " << name);
  return {};
}

// dst's rows [dst_row, dst_row + n) = src's rows [src_row, src_row + n), rows of `width` floats.
void copy_rows(Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n, int64_t width) {
  for (int64_t i = 0; i < n * width; i++) dst.data<float>()[dst_row * width + i] = src.data<float>()[src_row * width + i];
}

}  // namespace

TEST_CASE("mamba2: a layer of n_groups groups is the sum of one-group layers on its slices") {
  for (bool norm_before_gate : {false, true}) {
    CAPTURE(norm_before_gate);
    constexpr int64_t G = 2, D = 16, N = 3, P = 4, K = 4;
    const ModelConfig grouped = mamba2(2.0, G, norm_before_gate), single = mamba2(1.0, 1, norm_before_gate);
    const int64_t inner = 32, H = inner / P, inner_g = inner / G, H_g = H / G;  // 8 heads, 4 a group
    ParamStore store(5, 0.3, Device::CPU, DType::F32);
    std::unique_ptr<Mixer> layer = make_mamba2_layer(grouped, store);
    uint64_t seed = 100;
    for (NamedParameter& p : store.parameters())  // every parameter random, so a wrong slice shows
      if (p.name != "A_log" && p.name != "dt_bias")
        Tensor(p.var.value()).copy_(Tensor::randn(p.var.shape(), seed++, 0.3, DType::F32));
    const Tensor x = Tensor::randn({2, 7, D}, 9, 1.0, DType::F32);  // x: (B, T, D)
    MixerIO io;
    const Tensor want = layer->forward(Var(x), io).value();  // (B, T, D)

    Tensor sum = Tensor::zeros(want.shape(), DType::F32);
    for (int64_t g = 0; g < G; g++) {
      ParamStore part(6, 0.3, Device::CPU, DType::F32);
      std::unique_ptr<Mixer> one = make_mamba2_layer(single, part);
      // in_proj rows [z | x | B | C | dt]: inner, inner, G*N, G*N, H in the grouped layer.
      const Tensor w = param(store, "in_proj.weight");
      Tensor w1 = param(part, "in_proj.weight");
      copy_rows(w1, 0, w, g * inner_g, inner_g, D);                                // z
      copy_rows(w1, inner_g, w, inner + g * inner_g, inner_g, D);                  // x
      copy_rows(w1, 2 * inner_g, w, 2 * inner + g * N, N, D);                      // B
      copy_rows(w1, 2 * inner_g + N, w, 2 * inner + G * N + g * N, N, D);          // C
      copy_rows(w1, 2 * inner_g + 2 * N, w, 2 * inner + 2 * G * N + g * H_g, H_g, D);  // dt
      // conv1d over [x | B | C]: (conv_dim, 1, K) weights and (conv_dim) biases.
      for (auto [name, width] : {std::pair<const char*, int64_t>{"conv1d.weight", K}, {"conv1d.bias", 1}}) {
        const Tensor c = param(store, name);
        Tensor c1 = param(part, name);
        copy_rows(c1, 0, c, g * inner_g, inner_g, width);
        copy_rows(c1, inner_g, c, inner + g * N, N, width);
        copy_rows(c1, inner_g + N, c, inner + G * N + g * N, N, width);
      }
      for (const char* name : {"dt_bias", "A_log", "D"}) {
        Tensor p1 = param(part, name);
        copy_rows(p1, 0, param(store, name), g * H_g, H_g, 1);
      }
      Tensor norm1 = param(part, "norm.weight");
      copy_rows(norm1, 0, param(store, "norm.weight"), g * inner_g, inner_g, 1);
      const Tensor out = param(store, "out_proj.weight");  // (D, inner): the group's columns
      Tensor out1 = param(part, "out_proj.weight");
      for (int64_t r = 0; r < D; r++) copy_rows(out1, r, out, r * G + g, 1, inner_g);
      MixerIO io1;
      const Tensor y = one->forward(Var(x), io1).value();
      for (int64_t i = 0; i < sum.numel(); i++) sum.data<float>()[i] += y.data<float>()[i];
    }
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < want.numel(); i++) {
      worst = std::max(worst, std::abs(double(want.data<float>()[i]) - sum.data<float>()[i]));
      scale = std::max(scale, std::abs(double(want.data<float>()[i])));
    }
    CHECK(scale > 1e-2);  // a real output, not zeros
    CHECK(worst <= 1e-5 * scale);
  }
}
