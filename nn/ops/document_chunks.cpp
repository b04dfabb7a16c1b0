// The chunk-aligned layout of packed documents and the two token moves between it and the
// packed rows (see document_chunks.h).
#include "nn/ops/document_chunks.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "nn/ops/attention.h"
#include "nn/ops/check.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/document_chunks.h"
#endif

namespace hla {
namespace cpu {

template <class Real>
void gather_tokens_forward(Real* out, const Real* x, const int32_t* index, int64_t B, int64_t T, int64_t Tp,
                           int64_t inner) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t p = 0; p < Tp; p++) {
      const int32_t t = index[b * Tp + p];
      Real* dst = out + (b * Tp + p) * inner;
      if (t < 0) std::fill(dst, dst + inner, Real(0));
      else std::copy(x + (b * T + t) * inner, x + (b * T + t + 1) * inner, dst);
    }
}

template <class Real>
void scatter_tokens_forward(Real* out, const Real* y, const int32_t* index, int64_t B, int64_t T, int64_t Tp,
                            int64_t inner) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t p = 0; p < Tp; p++) {
      const int32_t t = index[b * Tp + p];
      if (t >= 0) std::copy(y + (b * Tp + p) * inner, y + (b * Tp + p + 1) * inner, out + (b * T + t) * inner);
    }
}

template void gather_tokens_forward<float>(float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t);
template void gather_tokens_forward<double>(double*, const double*, const int32_t*, int64_t, int64_t, int64_t,
                                            int64_t);
template void scatter_tokens_forward<float>(float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t);
template void scatter_tokens_forward<double>(double*, const double*, const int32_t*, int64_t, int64_t, int64_t,
                                             int64_t);

}  // namespace cpu

DocumentChunks document_chunks(const Tensor& doc_start, int64_t C) {
  HLA_CHECK(doc_start.dim() == 2 && !doc_start.is_cuda(), "document_chunks: doc_start must be (B, T) on the CPU, got ",
            doc_start.str());
  const int64_t B = doc_start.size(0), T = doc_start.size(1);
  check_document_starts(doc_start, B, T, Device::CPU, "document_chunks");
  HLA_CHECK(C >= 1, "document_chunks: the chunk size must be >= 1, got ", C);
  const int32_t* starts = doc_start.data<int32_t>();
  // pass 1: each token's place, every document moved up to the next multiple of C
  std::vector<int64_t> place(B * T);  // place: (B, T)
  int64_t Tp = 0;
  for (int64_t b = 0; b < B; b++) {
    int64_t next = 0;  // the first free place of the row
    for (int64_t t = 0; t < T; t++) {
      if (starts[b * T + t] == t) next = (next + C - 1) / C * C;  // a document starts at a chunk start
      place[b * T + t] = next++;
    }
    Tp = std::max(Tp, (next + C - 1) / C * C);
  }
  // pass 2: the index and the chunks that start a document
  std::vector<int32_t> index(B * Tp, -1), reset(B * (Tp / C), 0);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      index[b * Tp + place[b * T + t]] = static_cast<int32_t>(t);
      if (starts[b * T + t] == t) reset[b * (Tp / C) + place[b * T + t] / C] = 1;
    }
  return {Tensor::from_i32(index, {B, Tp}), Tensor::from_i32(reset, {B, Tp / C})};
}

DocumentStarts::DocumentStarts(Tensor doc_start, Tensor host) : doc_start_(std::move(doc_start)) {
  if (!doc_start_.defined()) return;
  layouts_ = std::make_shared<Layouts>();
  layouts_->host = std::move(host);
}

const DocumentChunks& DocumentStarts::chunks(int64_t C) const {
  HLA_CHECK(defined(), "DocumentStarts::chunks: no documents (doc_start undefined)");
  std::lock_guard<std::mutex> lock(layouts_->mutex);
  auto found = layouts_->by_chunk.find(C);
  if (found != layouts_->by_chunk.end()) return found->second;
  if (!layouts_->host.defined()) layouts_->host = doc_start_.to(Device::CPU);
  const DocumentChunks layout = document_chunks(layouts_->host, C);
  const Device device = doc_start_.device();
  return layouts_->by_chunk[C] = {layout.index.to(device), layout.chunk_reset.to(device)};
}

namespace {

// Checks x (B, rows, ...) against index (B, Tp) and returns inner, the elements of one token.
int64_t check_tokens(const Tensor& x, const Tensor& index, int64_t rows, const char* op) {
  HLA_CHECK(x.dim() >= 2 && x.size(1) == rows, op, ": the input must be (B, ", rows, ", ...), got ", x.str());
  HLA_CHECK(index.dim() == 2 && index.size(0) == x.size(0), op, ": index must be (B, T') with B = ", x.size(0),
            ", got ", index.str());
  check_dtype(index, DType::I32, op, "index");
  HLA_CHECK(index.device() == x.device(), op, ": index ", index.str(), " is not on the device of the input ",
            x.str());
  return rows > 0 ? x.numel() / (x.size(0) * rows) : 0;
}

// out (B, Tp, inner) = the places of x (B, T, inner); gather = true. Or out (B, T, inner) = the
// tokens of y (B, Tp, inner); gather = false.
void move_tokens(Tensor& out, const Tensor& in, const Tensor& index, int64_t T, int64_t Tp, int64_t inner,
                 bool gather) {
  const int64_t B = index.size(0);
  if (in.is_cuda()) {
    HLA_CUDA_ONLY(gather ? cuda::gather_tokens_forward(out.raw(), in.raw(), index.data<int32_t>(), B, T, Tp, inner,
                                                       in.dtype())
                         : cuda::scatter_tokens_forward(out.raw(), in.raw(), index.data<int32_t>(), B, T, Tp, inner,
                                                        in.dtype()));
    return;
  }
  dispatch_float(in.dtype(), gather ? "gather_tokens" : "scatter_tokens", [&](auto tag) {
    using Real = decltype(tag);
    if (gather) cpu::gather_tokens_forward(out.data<Real>(), in.data<Real>(), index.data<int32_t>(), B, T, Tp, inner);
    else cpu::scatter_tokens_forward(out.data<Real>(), in.data<Real>(), index.data<int32_t>(), B, T, Tp, inner);
  });
}

// The shape of x (B, rows, ...) with `rows` replaced.
Shape with_rows(const Shape& s, int64_t rows) {
  Shape out = s;
  out[1] = rows;
  return out;
}

}  // namespace

Var gather_tokens(const Var& x, const Tensor& index) {
  const Tensor xv = x.value();
  const int64_t T = x.size(1), Tp = index.dim() == 2 ? index.size(1) : 0;
  const int64_t inner = check_tokens(xv, index, T, "gather_tokens");
  Tensor out = Tensor::empty(with_rows(xv.shape(), Tp), xv.dtype(), xv.device());  // out: (B, T', ...)
  move_tokens(out, xv, index, T, Tp, inner, true);
  return record_op1(out, {x}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype(), xv.device());  // out = x[index]  =>  dx = scatter(dout)
    move_tokens(dx, g[0], index, T, Tp, inner, false);
    return std::vector<Tensor>{dx};
  }, "gather_tokens");
}

Var scatter_tokens(const Var& y, const Tensor& index, int64_t T) {
  const Tensor yv = y.value();
  const int64_t Tp = y.dim() >= 2 ? y.size(1) : 0;
  const int64_t inner = check_tokens(yv, index, Tp, "scatter_tokens");
  Tensor out = Tensor::empty(with_rows(yv.shape(), T), yv.dtype(), yv.device());  // out: (B, T, ...)
  move_tokens(out, yv, index, T, Tp, inner, false);
  return record_op1(out, {y}, [=](const std::vector<Tensor>& g) {
    Tensor dy = Tensor::empty(yv.shape(), yv.dtype(), yv.device());  // out[index] = y  =>  dy = gather(dout)
    move_tokens(dy, g[0], index, T, Tp, inner, true);
    return std::vector<Tensor>{dy};
  }, "scatter_tokens");
}

}  // namespace hla
