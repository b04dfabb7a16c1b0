// `hla bench attention`: the flash attention kernels (cuda/attention.cu), causal, bf16, at the
// two anchor shapes of targets.md, forward and forward+backward, against torch SDPA (flash).
// FLOPs count the visible half of the causal square: forward 4 B H T^2 D / 2 (two products),
// forward+backward 3.5x that (the backward's five products), as flash-attention reports them.
#include <cmath>

#include "cli/bench.h"
#ifdef HLA_CUDA
#include "cuda/attention.h"
#include "cuda/timer.h"
#include "tensor/tensor.h"
#endif

namespace {

using hla::bench::Row;

#ifdef HLA_CUDA

struct Shape {
  int64_t B, T, H, D;
  double sdpa_fwd_ms, sdpa_fwd_bwd_ms;  // targets.md
};

std::vector<Row> bench_attention(const hla::bench::Options& opt) {
  using hla::Device;
  using hla::DType;
  using hla::Tensor;
  std::vector<Row> rows;
  for (Shape s : {Shape{4, 4096, 16, 128, 0.499, 2.029}, Shape{8, 2048, 16, 64, 0.187, 0.733}}) {
    const int64_t n = s.B * s.T * s.H * s.D;
    // One random buffer; q, k, v and dout are views of it at different offsets.
    Tensor pool = Tensor::randn({n + 3 * 1024}, 7, 1.0, DType::BF16, Device::CUDA);
    auto view = [&](int i) { return pool.slice0(i * 1024, i * 1024 + n); };
    Tensor q = view(0), k = view(1), v = view(2), dout = view(3);
    Tensor o = Tensor::empty({n}, DType::BF16, Device::CUDA), dq = Tensor::empty({n}, DType::BF16, Device::CUDA),
           dk = Tensor::empty({n}, DType::BF16, Device::CUDA), dv = Tensor::empty({n}, DType::BF16, Device::CUDA);
    Tensor lse = Tensor::empty({s.B * s.H * s.T}, DType::F32, Device::CUDA);
    const double scale = 1.0 / std::sqrt(double(s.D));
    auto forward = [&] {
      hla::cuda::attention_forward(o.raw(), lse.data<float>(), q.raw(), k.raw(), v.raw(), s.B, s.T, s.H, s.H, s.D,
                                   s.D, scale, 0, DType::BF16);
    };
    auto backward = [&] {
      hla::cuda::attention_backward(dq.raw(), dk.raw(), dv.raw(), dout.raw(), q.raw(), k.raw(), v.raw(), o.raw(),
                                    lse.data<float>(), s.B, s.T, s.H, s.H, s.D, s.D, scale, 0, DType::BF16);
    };
    const double fwd_flops = 4.0 * s.B * s.H * double(s.T) * s.T * s.D / 2;
    const std::string shape = "B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " H" + std::to_string(s.H) +
                              " D" + std::to_string(s.D) + " bf16";
    const double fwd_ms = hla::cuda::median(hla::cuda::time_ms(forward, opt.warmup, opt.repeats));
    const double all_ms = hla::cuda::median(hla::cuda::time_ms([&] { forward(); backward(); }, opt.warmup, opt.repeats));
    rows.push_back({"attention fwd", shape, fwd_ms, fwd_flops / fwd_ms * 1e-9, 0, s.sdpa_fwd_ms, "torch SDPA flash"});
    rows.push_back({"attention fwd+bwd", shape, all_ms, 3.5 * fwd_flops / all_ms * 1e-9, 0, s.sdpa_fwd_bwd_ms,
                    "torch SDPA flash"});
  }
  return rows;
}
#else
std::vector<Row> bench_attention(const hla::bench::Options&) { return {}; }  // `hla bench` skips without a GPU
#endif

const bool registered = hla::bench::register_bench(
    "attention", "causal flash attention fwd and fwd+bwd (bf16, tensor cores) vs torch SDPA", bench_attention);

}  // namespace
