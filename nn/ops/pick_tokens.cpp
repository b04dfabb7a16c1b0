// Greedy and sampled token picks over rows of logits (see pick_tokens.h). The CPU references
// are the sequential scan and the sampling rule in four passes, one row at a time.
#include "nn/ops/pick_tokens.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "nn/ops/check.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/pick_tokens.h"
#endif

namespace hla {
namespace cpu {

template <class Real>
void argmax_rows_forward(int32_t* ids, const Real* z, const int32_t* widths, int64_t B, int64_t V) {
  for (int64_t b = 0; b < B; b++) {
    const Real* row = z + b * V;  // row: (V)
    ids[b] = static_cast<int32_t>(std::max_element(row, row + widths[b]) - row);  // the first maximum
  }
}

template void argmax_rows_forward<float>(int32_t*, const float*, const int32_t*, int64_t, int64_t);
template void argmax_rows_forward<double>(int32_t*, const double*, const int32_t*, int64_t, int64_t);

template <class Real>
void sample_tokens_forward(int32_t* ids, const Real* z, const int32_t* widths, const double* uniforms, int64_t B,
                           int64_t V, const SampleParams& p) {
  for (int64_t b = 0; b < B; b++) {
    const Real* row = z + b * V;  // row: (V)
    const int64_t width = widths[b];
    // pass 1: the k highest logits, highest first (ties: lowest id first)
    std::vector<int32_t> ranked(width);
    std::iota(ranked.begin(), ranked.end(), 0);
    const int64_t k = p.top_k > 0 ? std::min<int64_t>(p.top_k, width) : width;
    std::partial_sort(ranked.begin(), ranked.begin() + k, ranked.end(), [&](int32_t x, int32_t y) {
      return row[x] > row[y] || (row[x] == row[y] && x < y);
    });
    // pass 2: p_i = exp((z_i - z_max) / temperature) and their total
    std::vector<double> prob(k);
    double total = 0;
    for (int64_t i = 0; i < k; i++) total += prob[i] = std::exp(double(row[ranked[i]] - row[ranked[0]]) / p.temperature);
    // pass 3: the nucleus, the shortest prefix whose mass reaches top_p * total
    int64_t keep = 0;
    double mass = 0;
    while (keep < k && (keep == 0 || mass < p.top_p * total)) mass += prob[keep++];
    // pass 4: the candidate where u * mass falls
    double target = uniforms[b] * mass;
    ids[b] = ranked[keep - 1];
    for (int64_t i = 0; i < keep; i++) {
      if (target < prob[i]) {
        ids[b] = ranked[i];
        break;
      }
      target -= prob[i];
    }
  }
}

template void sample_tokens_forward<float>(int32_t*, const float*, const int32_t*, const double*, int64_t, int64_t,
                                           const SampleParams&);
template void sample_tokens_forward<double>(int32_t*, const double*, const int32_t*, const double*, int64_t, int64_t,
                                            const SampleParams&);

}  // namespace cpu

namespace {

// The checks both ops share: logits (B, V >= 1), widths (B) I32 on the logits' device.
void check_rows(const Tensor& logits, const Tensor& widths, const char* op) {
  HLA_CHECK(logits.dim() == 2 && logits.size(1) >= 1, op, ": logits must be (B, V >= 1), got ", logits.str());
  check_shape(widths, {logits.size(0)}, op, "widths");
  check_dtype(widths, DType::I32, op, "widths");
  HLA_CHECK(widths.device() == logits.device(), op, ": widths ", widths.str(), " is not on the device of logits ",
            logits.str());
}

// On the CPU: every width in [1, V], then the reference run with the logits' Real type.
template <class Run>
void run_on_cpu(const Tensor& logits, const Tensor& widths, const char* op, Run&& run) {
  const int64_t V = logits.size(1);
  const int32_t* w = widths.data<int32_t>();
  for (int64_t b = 0; b < logits.size(0); b++)
    HLA_CHECK(w[b] >= 1 && w[b] <= V, op, ": widths[", b, "] is ", w[b], ", must be in [1, ", V, "]");
  dispatch_float(logits.dtype(), op, [&](auto tag) { run(logits.data<decltype(tag)>(), w); });
}

}  // namespace

Tensor argmax_rows(const Tensor& logits, const Tensor& widths) {
  const char* op = "argmax_rows";
  check_rows(logits, widths, op);
  const int64_t B = logits.size(0), V = logits.size(1);
  Tensor ids = Tensor::empty({B}, DType::I32, logits.device());  // ids: (B)
  if (logits.is_cuda()) {
    HLA_CUDA_ONLY(cuda::argmax_rows_forward(ids.data<int32_t>(), logits.raw(), widths.data<int32_t>(), B, V,
                                            logits.dtype()));
    return ids;
  }
  run_on_cpu(logits, widths, op, [&](const auto* z, const int32_t* w) {
    cpu::argmax_rows_forward(ids.data<int32_t>(), z, w, B, V);
  });
  return ids;
}

Tensor sample_tokens(const Tensor& logits, const Tensor& widths, const Tensor& uniforms, const SampleParams& p) {
  const char* op = "sample_tokens";
  check_rows(logits, widths, op);
  const int64_t B = logits.size(0), V = logits.size(1);
  check_shape(uniforms, {B}, op, "uniforms");
  check_dtype(uniforms, DType::F64, op, "uniforms");
  HLA_CHECK(uniforms.device() == logits.device(), op, ": uniforms ", uniforms.str(), " is not on the device of logits ",
            logits.str());
  HLA_CHECK(std::isfinite(p.temperature) && p.temperature > 0, op, ": temperature must be > 0, got ", p.temperature);
  HLA_CHECK(p.top_k >= 0, op, ": top_k must be >= 0, got ", p.top_k);
  HLA_CHECK(p.top_p > 0 && p.top_p <= 1, op, ": top_p must be in (0, 1], got ", p.top_p);
  Tensor ids = Tensor::empty({B}, DType::I32, logits.device());  // ids: (B)
  if (logits.is_cuda()) {
    HLA_CHECK(p.top_k >= 1 && p.top_k <= kMaxDeviceTopK, op, ": on the GPU top_k must be in [1, ", kMaxDeviceTopK,
              "], got ", p.top_k, " (sample from logits copied to the CPU)");
    HLA_CUDA_ONLY(cuda::sample_tokens_forward(ids.data<int32_t>(), logits.raw(), widths.data<int32_t>(),
                                              uniforms.data<double>(), B, V, p, logits.dtype()));
    return ids;
  }
  run_on_cpu(logits, widths, op, [&](const auto* z, const int32_t* w) {
    cpu::sample_tokens_forward(ids.data<int32_t>(), z, w, uniforms.data<double>(), B, V, p);
  });
  return ids;
}

}  // namespace hla
