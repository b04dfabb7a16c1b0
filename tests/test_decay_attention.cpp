// Decay linear attention and RWKV-6: the chunked forms equal the token recurrences (forward and
// every gradient, float64), the mixers that reduce to the decay op do (HGRN-2 with k = 1 - e^g
// against a direct HGRN-2 loop; RetNet's constant gate against the parallel retention form),
// float32 agrees with float64, and running T tokens then T more from the final state equals
// one run over 2T, and keep_states changes no bit (on the GPU: the backward reading the chunk
// states its forward kept equals the one replaying them), nor does the CPU's thread count.
// Gradients of the recurrences are finite-difference checked by the gradcheck registry
// (nn/ops/decay_attention.cpp, nn/ops/rwkv6.cpp).
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "nn/ops/chunk_util.h"
#include "nn/ops/decay_attention.h"
#include "nn/ops/parallel.h"
#include "nn/ops/rwkv6.h"
#include "tests/test_util.h"

using namespace hla;
using hla::testing::max_rel_err;

namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// B, T; q/k heads H and value heads HV; widths dk, dv. RWKV-6 uses HV = H.
struct Dims {
  int64_t B, T, H, HV, dk, dv;
};

// Random F64 inputs in the op's argument order (decay: q, k, v, g, h0; rwkv6: r, k, v, w, u, h0).
std::vector<Tensor> decay_inputs(const Dims& d, bool vector_gate, double normalizer, uint64_t seed) {
  Shape g_shape = vector_gate ? Shape{d.B, d.T, d.HV, d.dk} : Shape{d.B, d.T, d.HV};
  return {Tensor::randn({d.B, d.T, d.H, d.dk}, seed, 1.0, DType::F64),
          Tensor::randn({d.B, d.T, d.H, d.dk}, seed + 1, 1.0, DType::F64),
          Tensor::randn({d.B, d.T, d.HV, d.dv}, seed + 2, 1.0, DType::F64),
          decay_chunk::random_log_gate(g_shape, seed + 3, normalizer),
          Tensor::randn({d.B, d.HV, d.dk, d.dv}, seed + 4, 1.0, DType::F64)};
}

std::vector<Tensor> rwkv6_inputs(const Dims& d, double normalizer, uint64_t seed) {
  return {Tensor::randn({d.B, d.T, d.H, d.dk}, seed, 1.0, DType::F64),
          Tensor::randn({d.B, d.T, d.H, d.dk}, seed + 1, 1.0, DType::F64),
          Tensor::randn({d.B, d.T, d.H, d.dv}, seed + 2, 1.0, DType::F64),
          decay_chunk::random_log_gate({d.B, d.T, d.H, d.dk}, seed + 3, normalizer),
          Tensor::randn({d.H, d.dk}, seed + 4, 1.0, DType::F64),
          Tensor::randn({d.B, d.H, d.dk, d.dv}, seed + 5, 1.0, DType::F64)};
}

// An op run on Vars: returns {o, final_state}.
using OpFn = std::vector<Var> (*)(const std::vector<Var>&, double scale, int64_t chunk_size, bool keep_states);

std::vector<Var> run_decay(const std::vector<Var>& x, double scale, int64_t chunk_size, bool keep_states = true) {
  DecayAttentionOutput out = decay_attention(x[0], x[1], x[2], x[3], x[4], scale, chunk_size, keep_states);
  return {out.o, out.final_state};
}
std::vector<Var> run_rwkv6(const std::vector<Var>& x, double scale, int64_t chunk_size, bool keep_states = true) {
  Rwkv6Output out = rwkv6(x[0], x[1], x[2], x[3], x[4], x[5], scale, chunk_size, keep_states);
  return {out.o, out.final_state};
}

// Runs the op in `dtype` on `device`, backpropagates fixed random gradients of o and of the final
// state, and returns {o, final_state, gradient of every input} as F64.
std::vector<Tensor> outputs_and_grads(OpFn op, const std::vector<Tensor>& inputs, DType dtype, double scale,
                                      int64_t chunk_size, Device device = Device::CPU, bool keep_states = true) {
  std::vector<Var> x;
  for (const Tensor& t : inputs) x.emplace_back(t.to(device).to(dtype), true);
  std::vector<Var> out = op(x, scale, chunk_size, keep_states);
  Tensor d_o = Tensor::randn(out[0].shape(), 901, 1.0, DType::F64).to(device).to(dtype);
  Tensor d_ht = Tensor::randn(out[1].shape(), 902, 1.0, DType::F64).to(device).to(out[1].dtype());
  run_backward(out, {d_o, d_ht});
  std::vector<Tensor> result{out[0].value().to(DType::F64), out[1].value().to(DType::F64)};
  for (const Var& v : x) result.push_back(v.grad().to(DType::F64));
  return result;
}

const std::vector<std::string> kDecayNames{"o", "final_state", "dq", "dk", "dv", "dg", "dh0"};
const std::vector<std::string> kRwkv6Names{"o", "final_state", "dr", "dk", "dv", "dw", "du", "dh0"};

// Every tensor of `got` within `tol` (relative to the largest entry of the reference).
void check_all_close(const std::vector<Tensor>& got, const std::vector<Tensor>& ref,
                     const std::vector<std::string>& names, double tol) {
  REQUIRE(got.size() == names.size());
  for (size_t i = 0; i < names.size(); i++) {
    INFO(names[i]);
    CHECK(max_rel_err(got[i], ref[i]) <= tol);
  }
}

// A 100-token batch with grouped value heads: chunks of 16 and 64 both leave a partial chunk.
const Dims kChunkDims{2, 100, 2, 4, 8, 6};

}  // namespace

TEST_CASE("decay_attention: chunked equals recurrent, forward and all gradients (float64)") {
  for (bool vector_gate : {false, true})
    for (double normalizer : {0.1, 10.0}) {
      const std::vector<Tensor> in = decay_inputs(kChunkDims, vector_gate, normalizer, 100);
      const std::vector<Tensor> ref = outputs_and_grads(run_decay, in, DType::F64, 0.35, 0);
      for (int64_t chunk_size : {16, 64}) {
        INFO("vector gate ", vector_gate, ", gate normalizer ", normalizer, ", chunk ", chunk_size);
        check_all_close(outputs_and_grads(run_decay, in, DType::F64, 0.35, chunk_size), ref, kDecayNames, 1e-10);
      }
    }
}

TEST_CASE("rwkv6: chunked equals recurrent, forward and all gradients (float64)") {
  const Dims d{2, 100, 3, 3, 8, 6};
  for (double normalizer : {0.1, 10.0}) {
    const std::vector<Tensor> in = rwkv6_inputs(d, normalizer, 200);
    const std::vector<Tensor> ref = outputs_and_grads(run_rwkv6, in, DType::F64, 0.35, 0);
    for (int64_t chunk_size : {16, 64}) {
      INFO("gate normalizer ", normalizer, ", chunk ", chunk_size);
      check_all_close(outputs_and_grads(run_rwkv6, in, DType::F64, 0.35, chunk_size), ref, kRwkv6Names, 1e-10);
    }
  }
}

TEST_CASE("keep_states changes no bit (CPU: ignored; GPU: the backward reads the kept chunk states)") {
  // On the GPU in bf16 at dk 128, dv 64 (the chunked kernels), T = 150: a partial last chunk;
  // with an initial state, grouped value heads for the decay op.
  auto same = [](const std::vector<Tensor>& a, const std::vector<Tensor>& b, const std::vector<std::string>& names) {
    for (size_t i = 0; i < names.size(); i++) {
      INFO(names[i]);
      CHECK(a[i].to_f64_vector() == b[i].to_f64_vector());
    }
  };
  for (bool vector_gate : {false, true}) {
    INFO("decay_attention, vector gate ", vector_gate);
    const std::vector<Tensor> in = decay_inputs(kChunkDims, vector_gate, 1.0, 500);
    same(outputs_and_grads(run_decay, in, DType::F64, 0.35, 16, Device::CPU, true),
         outputs_and_grads(run_decay, in, DType::F64, 0.35, 16, Device::CPU, false), kDecayNames);
    if (!cuda_available()) continue;
    const std::vector<Tensor> wide = decay_inputs({2, 150, 2, 4, 128, 64}, vector_gate, 1.0, 600);
    same(outputs_and_grads(run_decay, wide, DType::BF16, 0.1, 0, Device::CUDA, true),
         outputs_and_grads(run_decay, wide, DType::BF16, 0.1, 0, Device::CUDA, false), kDecayNames);
  }
  INFO("rwkv6");
  const std::vector<Tensor> in = rwkv6_inputs({2, 100, 3, 3, 8, 6}, 1.0, 700);
  same(outputs_and_grads(run_rwkv6, in, DType::F64, 0.35, 16, Device::CPU, true),
       outputs_and_grads(run_rwkv6, in, DType::F64, 0.35, 16, Device::CPU, false), kRwkv6Names);
  if (!cuda_available()) return;
  const std::vector<Tensor> wide = rwkv6_inputs({2, 150, 2, 2, 128, 64}, 1.0, 800);
  same(outputs_and_grads(run_rwkv6, wide, DType::BF16, 0.1, 0, Device::CUDA, true),
       outputs_and_grads(run_rwkv6, wide, DType::BF16, 0.1, 0, Device::CUDA, false), kRwkv6Names);
}

TEST_CASE("decay_attention and rwkv6: the CPU result is bit for bit the same for 1 to 3 threads") {
  // parallel_for splits (batch, head) tasks: B * HV = 8 in the decay forward, B * H = 4 in its
  // backward and in rwkv6; none divides by 3 (ranges of unequal sizes).
  const int threads_before = cpu_threads();
  auto check_same = [](OpFn op, const std::vector<Tensor>& in, int64_t chunk, const std::vector<std::string>& names) {
    std::vector<std::vector<Tensor>> runs;
    for (int threads : {1, 2, 3}) {
      set_cpu_threads(threads);
      runs.push_back(outputs_and_grads(op, in, DType::F32, 0.35, chunk));
    }
    for (size_t r = 1; r < runs.size(); r++)
      for (size_t i = 0; i < names.size(); i++) {
        INFO("run ", r, " ", names[i]);
        CHECK(runs[r][i].to_f64_vector() == runs[0][i].to_f64_vector());
      }
  };
  for (int64_t chunk : {0, 16}) {
    for (bool vector_gate : {false, true}) {
      INFO("decay_attention, vector gate ", vector_gate, ", chunk ", chunk);
      check_same(run_decay, decay_inputs({2, 40, 2, 4, 8, 6}, vector_gate, 1.0, 750), chunk, kDecayNames);
    }
    INFO("rwkv6, chunk ", chunk);
    check_same(run_rwkv6, rwkv6_inputs({2, 40, 2, 2, 8, 6}, 1.0, 760), chunk, kRwkv6Names);
  }
  set_cpu_threads(threads_before);
}

TEST_CASE("float32 agrees with float64 to 1e-5 (decay_attention both gates, rwkv6; recurrent and chunked)") {
  const Dims d{2, 60, 2, 4, 8, 6};
  for (int64_t chunk_size : {0, 16}) {
    INFO("chunk ", chunk_size);
    for (bool vector_gate : {false, true}) {
      INFO("decay_attention, vector gate ", vector_gate);
      const std::vector<Tensor> in = decay_inputs(d, vector_gate, 1.0, 300);
      check_all_close(outputs_and_grads(run_decay, in, DType::F32, 0.35, chunk_size),
                      outputs_and_grads(run_decay, in, DType::F64, 0.35, chunk_size), kDecayNames, 1e-5);
    }
    INFO("rwkv6");
    const std::vector<Tensor> in = rwkv6_inputs({2, 60, 2, 2, 8, 6}, 1.0, 400);
    check_all_close(outputs_and_grads(run_rwkv6, in, DType::F32, 0.35, chunk_size),
                    outputs_and_grads(run_rwkv6, in, DType::F64, 0.35, chunk_size), kRwkv6Names, 1e-5);
  }
}

TEST_CASE("HGRN-2 through the decay op (k = 1 - exp(g)) equals a direct HGRN-2 loop") {
  // mixers.md 9: per head, h_t[d, :] = exp(g_t[d]) h_{t-1}[d, :] + (1 - exp(g_t[d])) v_t, and
  // o_t = scale * sum_d q_t[d] h_t[d, :]: every key channel is an HGRN over the values.
  const int64_t B = 2, T = 37, H = 3, dk = 4, dv = 5;
  const double scale = 1.0 / std::sqrt(double(dk));
  std::vector<Tensor> in = decay_inputs({B, T, H, H, dk, dv}, true, 1.0, 500);  // q, k, v, g, h0
  std::vector<double> q = in[0].to_f64_vector(), v = in[2].to_f64_vector(), g = in[3].to_f64_vector();
  std::vector<double> h0 = in[4].to_f64_vector();
  std::vector<double> k(g.size());
  for (size_t i = 0; i < g.size(); i++) k[i] = 1.0 - std::exp(g[i]);
  in[1] = Tensor::from_f64(k, in[1].shape(), DType::F64);

  std::vector<double> o_ref(B * T * H * dv), ht_ref(h0.size());
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      std::vector<double> state(h0.begin() + (b * H + h) * dk * dv, h0.begin() + (b * H + h + 1) * dk * dv);
      for (int64_t t = 0; t < T; t++) {
        const int64_t row = (b * T + t) * H + h;
        for (int64_t c = 0; c < dk; c++) {
          const double a = std::exp(g[row * dk + c]);
          for (int64_t j = 0; j < dv; j++)
            state[c * dv + j] = a * state[c * dv + j] + (1 - a) * v[row * dv + j];
        }
        for (int64_t j = 0; j < dv; j++) {
          double acc = 0;
          for (int64_t c = 0; c < dk; c++) acc += q[row * dk + c] * state[c * dv + j];
          o_ref[row * dv + j] = scale * acc;
        }
      }
      std::copy(state.begin(), state.end(), ht_ref.begin() + (b * H + h) * dk * dv);
    }
  for (int64_t chunk_size : {0, 16}) {
    INFO("chunk ", chunk_size);
    std::vector<Var> x;
    for (const Tensor& t : in) x.emplace_back(t);
    std::vector<Var> out = run_decay(x, scale, chunk_size);
    CHECK(max_rel_err(out[0].value(), Tensor::from_f64(o_ref, out[0].shape(), DType::F64)) <= 1e-12);
    CHECK(max_rel_err(out[1].value(), Tensor::from_f64(ht_ref, out[1].shape(), DType::F64)) <= 1e-12);
  }
}

TEST_CASE("RetNet: a constant scalar gate equals the parallel retention form") {
  // mixers.md 7: gamma_h = 1 - 2^(-5-h). With S_0 the initial state and tokens t = 0..T-1,
  //   o_t = scale * ( sum_{s <= t} gamma^(t-s) (q_t . k_s) v_s + gamma^(t+1) S_0^T q_t ),
  // i.e. O = scale * ((Q K^T) (.) D) V + ..., D[t,s] = gamma^(t-s) below the diagonal.
  const int64_t B = 2, T = 45, H = 3, dk = 4, dv = 6;
  const double scale = 1.0 / std::sqrt(double(dk));
  std::vector<Tensor> in = decay_inputs({B, T, H, H, dk, dv}, false, 1.0, 600);
  std::vector<double> g(B * T * H);
  for (int64_t i = 0; i < B * T * H; i++) g[i] = std::log(1.0 - std::pow(2.0, -5.0 - double(i % H)));
  in[3] = Tensor::from_f64(g, {B, T, H}, DType::F64);

  std::vector<double> q = in[0].to_f64_vector(), k = in[1].to_f64_vector(), v = in[2].to_f64_vector();
  std::vector<double> h0 = in[4].to_f64_vector(), o_ref(B * T * H * dv);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const double gamma = 1.0 - std::pow(2.0, -5.0 - double(h));
      Mat Q(T, dk), K(T, dk), V(T, dv), D = Mat::Zero(T, T);
      for (int64_t t = 0; t < T; t++) {
        const int64_t row = (b * T + t) * H + h;
        for (int64_t c = 0; c < dk; c++) Q(t, c) = q[row * dk + c], K(t, c) = k[row * dk + c];
        for (int64_t j = 0; j < dv; j++) V(t, j) = v[row * dv + j];
        for (int64_t s = 0; s <= t; s++) D(t, s) = std::pow(gamma, double(t - s));
      }
      Mat S0 = Eigen::Map<const Mat>(h0.data() + (b * H + h) * dk * dv, dk, dv);
      Mat O = scale * (Q * K.transpose()).cwiseProduct(D) * V;
      for (int64_t t = 0; t < T; t++) {
        O.row(t) += scale * std::pow(gamma, double(t + 1)) * Q.row(t) * S0;
        for (int64_t j = 0; j < dv; j++) o_ref[((b * T + t) * H + h) * dv + j] = O(t, j);
      }
    }
  for (int64_t chunk_size : {0, 16, 64}) {
    INFO("chunk ", chunk_size);
    std::vector<Var> x;
    for (const Tensor& t : in) x.emplace_back(t);
    std::vector<Var> out = run_decay(x, scale, chunk_size);
    CHECK(max_rel_err(out[0].value(), Tensor::from_f64(o_ref, out[0].shape(), DType::F64)) <= 1e-12);
  }
}

// Splits a (B, 2T, ...) tensor into its two halves along time.
std::vector<Tensor> time_halves(const Tensor& t) {
  const std::vector<double> x = t.to_f64_vector();
  Shape half_shape = t.shape();
  half_shape[1] /= 2;
  const int64_t per_batch = t.numel() / t.size(0), half = per_batch / 2;
  std::vector<double> first, second;
  for (int64_t b = 0; b < t.size(0); b++) {
    first.insert(first.end(), x.begin() + b * per_batch, x.begin() + b * per_batch + half);
    second.insert(second.end(), x.begin() + b * per_batch + half, x.begin() + (b + 1) * per_batch);
  }
  return {Tensor::from_f64(first, half_shape, DType::F64), Tensor::from_f64(second, half_shape, DType::F64)};
}

TEST_CASE("running T tokens, then T more from the final state, equals one run over 2T") {
  const int64_t B = 2, T = 21, H = 2, HV = 4, dk = 3, dv = 5;
  struct Case {
    const char* name;
    OpFn op;
    std::vector<Tensor> inputs;  // 4 sequence inputs (B, 2T, ...), then u for rwkv6, then the initial state
  };
  const std::vector<Case> cases{
      {"decay_attention scalar gate", run_decay, decay_inputs({B, 2 * T, H, HV, dk, dv}, false, 1.0, 700)},
      {"decay_attention vector gate", run_decay, decay_inputs({B, 2 * T, H, HV, dk, dv}, true, 1.0, 710)},
      {"rwkv6", run_rwkv6, rwkv6_inputs({B, 2 * T, H, H, dk, dv}, 1.0, 720)}};
  NoGradGuard no_grad;
  for (const Case& c : cases)
    for (int64_t chunk_size : {0, 8}) {
      INFO(c.name, ", chunk ", chunk_size);
      auto run = [&](const std::vector<Tensor>& inputs) {
        std::vector<Var> x(inputs.begin(), inputs.end());
        return c.op(x, 0.5, chunk_size, true);
      };
      // Inputs of one half: its slice of the sequence inputs, the rest unchanged, and `state`.
      auto half_inputs = [&](int half, const Tensor& state) {
        std::vector<Tensor> x = c.inputs;
        for (int i = 0; i < 4; i++) x[i] = time_halves(c.inputs[i])[half];
        x.back() = state;
        return x;
      };
      const std::vector<Var> full = run(c.inputs);
      const std::vector<Var> first = run(half_inputs(0, c.inputs.back()));
      const std::vector<Var> second = run(half_inputs(1, first[1].value()));
      const std::vector<Tensor> full_o = time_halves(full[0].value());
      CHECK(max_rel_err(first[0].value(), full_o[0]) <= 1e-12);
      CHECK(max_rel_err(second[0].value(), full_o[1]) <= 1e-12);
      CHECK(max_rel_err(second[1].value(), full[1].value()) <= 1e-12);
    }
}

TEST_CASE("decay_attention and rwkv6 reject inconsistent shapes with the field named") {
  std::vector<Var> x;
  for (const Tensor& t : decay_inputs({1, 4, 2, 3, 2, 2}, false, 1.0, 800)) x.emplace_back(t);
  CHECK_THROWS_WITH_AS(run_decay(x, 1.0, 0), doctest::Contains("multiple of the q/k heads"), Error);
  std::vector<Var> y;
  for (const Tensor& t : rwkv6_inputs({1, 4, 2, 2, 3, 2}, 1.0, 810)) y.emplace_back(t);
  y[4] = Var(Tensor::zeros({2, 4}, DType::F64));  // u must be (H, dk) = (2, 3)
  CHECK_THROWS_WITH_AS(run_rwkv6(y, 1.0, 0), doctest::Contains("rwkv6: u has shape"), Error);
}
