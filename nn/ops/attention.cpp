// Causal softmax attention: the device dispatch (cuda::attention_* for GPU tensors, the CPU
// reference of nn/ops/attention_reference.cpp otherwise) and the Var function with its one
// backward closure.
#include "nn/ops/attention.h"

#include <climits>
#include <string>
#include <vector>

#include "nn/ops/check.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/attention.h"
#endif

namespace hla {
namespace {

// The device's kernels: cuda::attention_* (flash style) for GPU tensors, cpu::attention_*
// otherwise. lse in d.lse_dtype.
void attention_forward(Tensor& o, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionDims& d) {
  if (q.is_cuda()) {
    HLA_CUDA_ONLY(cuda::attention_forward(o.raw(), lse.data<float>(), q.raw(), k.raw(), v.raw(), d, q.dtype()));
    return;
  }
  dispatch_float(q.dtype(), "attention", [&](auto tag) {
    using Real = decltype(tag);
    cpu::attention_forward(o.data<Real>(), lse.data<Real>(), q.data<Real>(), k.data<Real>(), v.data<Real>(), d);
  });
}

void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& o, const Tensor& lse, const AttentionDims& d) {
  if (q.is_cuda()) {
    HLA_CUDA_ONLY(cuda::attention_backward(dq.raw(), dk.raw(), dv.raw(), dout.raw(), q.raw(), k.raw(), v.raw(), o.raw(),
                                           lse.data<float>(), d, q.dtype()));
    return;
  }
  dispatch_float(q.dtype(), "attention", [&](auto tag) {
    using Real = decltype(tag);
    cpu::attention_backward(dq.data<Real>(), dk.data<Real>(), dv.data<Real>(), dout.data<Real>(), q.data<Real>(),
                            k.data<Real>(), v.data<Real>(), o.data<Real>(), lse.data<Real>(), d);
  });
}

}  // namespace

Tensor document_starts(const std::vector<int64_t>& cu_seqlens, int64_t B, int64_t T) {
  HLA_CHECK(B >= 0 && T >= 0 && T <= INT32_MAX, "document_starts: bad batch shape (", B, ", ", T, ")");
  HLA_CHECK(cu_seqlens.size() >= 2 && cu_seqlens.front() == 0 && cu_seqlens.back() == B * T,
            "document_starts: cu_seqlens must run from 0 to B * T = ", B * T, ", got ", cu_seqlens.size(),
            " entries", cu_seqlens.empty() ? std::string() : " from " + std::to_string(cu_seqlens.front()) + " to " +
                                                               std::to_string(cu_seqlens.back()));
  std::vector<int32_t> starts(B * T);
  size_t next = 0;  // the first entry of cu_seqlens past the current token
  int64_t doc = 0;  // the current document's first token (flat index)
  for (int64_t i = 0; i < B * T; i++) {
    while (next < cu_seqlens.size() && cu_seqlens[next] <= i) {
      HLA_CHECK(next == 0 || cu_seqlens[next] >= cu_seqlens[next - 1], "document_starts: cu_seqlens[", next, "] = ",
                cu_seqlens[next], " is below cu_seqlens[", next - 1, "] = ", cu_seqlens[next - 1]);
      doc = cu_seqlens[next++];
    }
    HLA_CHECK(i % T != 0 || doc == i, "document_starts: row ", i / T, " starts at token ", i,
              ", which is not in cu_seqlens (a document would span two rows)");
    starts[i] = static_cast<int32_t>(doc - i / T * T);
  }
  return Tensor::from_i32(starts, {B, T});
}

Tensor document_positions(const Tensor& doc_start) {
  HLA_CHECK(doc_start.dtype() == DType::I32 && doc_start.dim() == 2 && !doc_start.is_cuda(),
            "document_positions: doc_start must be (B, T) I32 on the CPU, got ", doc_start.str());
  const int64_t T = doc_start.size(1);
  const int32_t* starts = doc_start.data<int32_t>();
  std::vector<int32_t> positions(doc_start.numel());
  for (int64_t i = 0; i < doc_start.numel(); i++) positions[i] = static_cast<int32_t>(i % T) - starts[i];
  return Tensor::from_i32(positions, doc_start.shape());
}

void check_document_starts(const Tensor& doc_start, int64_t B, int64_t T, Device device, const char* op) {
  HLA_CHECK(doc_start.dtype() == DType::I32 && doc_start.dim() == 2 && doc_start.size(0) == B &&
                doc_start.size(1) == T && doc_start.device() == device,
            op, ": doc_start must be (B, T) = (", B, ", ", T, ") I32 on the inputs' device, got ", doc_start.str());
  if (doc_start.is_cuda()) return;  // the GPU's were built from cu_seqlens, checked there
  const int32_t* s = doc_start.data<int32_t>();
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      const int32_t x = s[b * T + t];
      HLA_CHECK(x == t || (t > 0 && x == s[b * T + t - 1]), op, ": doc_start[", b, ", ", t, "] = ", x,
                " is neither ", t, " (a document starts) nor the previous entry",
                t > 0 ? " " + std::to_string(s[b * T + t - 1]) : std::string());
    }
}

Var attention(const Var& q, const Var& k, const Var& v, double scale, int64_t window, const Tensor& doc_start) {
  HLA_CHECK(q.dim() == 4, "attention: q must be (B, T, H, D), got ", q.value().str());
  HLA_CHECK(k.dim() == 4, "attention: k must be (B, T, Hkv, D), got ", k.value().str());
  HLA_CHECK(v.dim() == 4, "attention: v must be (B, T, Hkv, Dv), got ", v.value().str());
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2), Dv = v.size(3);
  check_shape(k.value(), {B, T, Hkv, D}, "attention", "k");
  check_shape(v.value(), {B, T, Hkv, Dv}, "attention", "v");
  check_operand(k.value(), q.value(), "attention", "k");
  check_operand(v.value(), q.value(), "attention", "v");
  HLA_CHECK(Hkv > 0 && H % Hkv == 0, "attention: query heads H = ", H, " must be a multiple of kv heads Hkv = ", Hkv);
  HLA_CHECK(window >= 0, "attention: window must be >= 0 (0 = full causal), got ", window);
  if (doc_start.defined()) check_document_starts(doc_start, B, T, q.device(), "attention");
  const AttentionDims d{B, T, H, Hkv, D, Dv, scale, window, accum_dtype(q.value())};
  // d with doc_start's data (the backward closure holds a copy of doc_start, keeping it alive)
  auto with_documents = [](AttentionDims dims, const Tensor& starts) {
    if (starts.defined()) dims.doc_start = starts.data<int32_t>();
    return dims;
  };
  const DType dt = q.dtype();
  const Device dev = q.device();
  Tensor qv = q.value(), kv = k.value(), vv = v.value();
  Tensor o = Tensor::empty({B, T, H, Dv}, dt, dev);           // o: (B, T, H, Dv)
  Tensor lse = Tensor::empty({B, H, T}, d.lse_dtype, dev);    // lse: (B, H, T)
  attention_forward(o, lse, qv, kv, vv, with_documents(d, doc_start));
  return record_op1(o, {q, k, v}, [=](const std::vector<Tensor>& g) {
    Tensor dq = Tensor::empty(qv.shape(), dt, dev);
    Tensor dk = Tensor::empty(kv.shape(), dt, dev);
    Tensor dv = Tensor::empty(vv.shape(), dt, dev);
    attention_backward(dq, dk, dv, g[0], qv, kv, vv, o, lse, with_documents(d, doc_start));
    return std::vector<Tensor>{dq, dk, dv};
  }, "attention");
}

}  // namespace hla
