// Packed documents laid out for the chunked recurrence kernels (issue W2.2): every document of a
// row starts at a multiple of the chunk size C in a padded row of T' tokens, T' = the max over
// rows of the sum over the row's documents of round_up(length, C). A chunk then never holds two
// documents, so the chunked form resets its state at the chunks that start one (chunk_reset) and
// nothing else changes. Padding places hold zeros in every input (gather_tokens), which the
// chunked delta rule treats as no-ops: g = 0 decays nothing, b = 0 erases nothing, w = 0 and
// k = 0 write nothing, so the state at the end of a row is the state at the end of its last
// document.
//
//   gather_tokens:  out[b, p] = x[b, index[b, p]]  (0 where index[b, p] = -1)      (B, T, ...) -> (B, T', ...)
//   scatter_tokens: out[b, index[b, p]] = y[b, p]  (places with index -1 dropped)  (B, T', ...) -> (B, T, ...)
// Every token of a row has exactly one place, so each op is the other's backward.
//
// DocumentStarts is packed documents as the sequence ops take them: doc_start and, built at most
// once from a host copy of it and shared by every copy of the value, each chunk size's layout. A
// model hands one value to all its layers (hla::Documents), so a forward (with its recomputes and
// its backward) builds a layout once per chunk size, not once per layer, and copies doc_start to
// the host at most once (not at all where the loader gave its host copy).
#pragma once
#include <map>
#include <memory>
#include <mutex>

#include "autograd/var.h"
#include "nn/ops/attention.h"

namespace hla {

struct DocumentChunks {
  Tensor index;        // (B, T') I32: the row-relative token at each place, or -1 (padding)
  Tensor chunk_reset;  // (B, T' / C) I32: 1 where a chunk starts a document, else 0
};

// doc_start: (B, T) I32 on the CPU (nn/ops/attention.h: document_starts); C >= 1. The results
// are on the CPU (the caller moves them to its device).
DocumentChunks document_chunks(const Tensor& doc_start, int64_t C);

class DocumentStarts {
 public:
  DocumentStarts() = default;
  // doc_start: (B, T) I32 on the ops' device (document_starts), or undefined (one document a
  // row); host: the same values on the CPU, or undefined (copied at the first layout). Implicit:
  // an op called with a bare doc_start builds the layouts it needs itself.
  DocumentStarts(Tensor doc_start, Tensor host = Tensor());  // NOLINT(google-explicit-constructor)
  bool defined() const { return doc_start_.defined(); }
  const Tensor& tensor() const { return doc_start_; }
  // The layout of chunks of C tokens (document_chunks), index and chunk_reset on doc_start's
  // device; built at the first call for C by any copy of this value. Only where defined().
  const DocumentChunks& chunks(int64_t C) const;

 private:
  struct Layouts {
    std::mutex mutex;  // a value may be shared by the threads of data-parallel replicas
    Tensor host;       // doc_start on the CPU, or undefined until the first layout
    std::map<int64_t, DocumentChunks> by_chunk;
  };
  Tensor doc_start_;
  std::shared_ptr<Layouts> layouts_;
};

// x: (B, T, ...) float; index: (B, T') I32 on x's device, from document_chunks. (B, T', ...)
Var gather_tokens(const Var& x, const Tensor& index);
// y: (B, T', ...) float; index: (B, T') I32 on y's device, from document_chunks for T tokens a
// row. (B, T, ...)
Var scatter_tokens(const Var& y, const Tensor& index, int64_t T);

// A recurrence with a chunked form on packed documents (delta_rule, decay_attention, rwkv6), after
// checking doc_start against d (B, T, on `device`) and that the op has no initial state: with
// chunk = 0 the token recurrence on the rows, d.doc_start set; with chunk = C > 0 the chunked form
// on the layout of chunks of C, the inputs with a token axis gathered there, d.T, d.chunk_size and
// d.chunk_reset set, the first token_outputs outputs scattered back (the others, final states,
// are the rows' own). run(d, xs, keep) runs the op on xs with descriptor d (Dims: B, T,
// chunk_size, doc_start, chunk_reset) and keeps `keep`, the tensor behind d's pointer, alive for
// its backward.
template <class Dims, class Run>
std::vector<Var> run_on_documents(const char* op, const DocumentStarts& documents, Dims d, int64_t chunk,
                                  Device device, const Var& initial_state, const std::vector<Var>& xs,
                                  size_t token_outputs, Run&& run) {
  check_document_starts(documents.tensor(), d.B, d.T, device, op);
  HLA_CHECK(!initial_state.defined(), op, ": with packed documents (doc_start) the initial state must be undefined, ",
            "got ", initial_state.value().str());
  if (chunk == 0) {
    d.doc_start = documents.tensor().data<int32_t>();
    return run(d, xs, documents.tensor());
  }
  const DocumentChunks& layout = documents.chunks(chunk);
  const int64_t T = d.T;
  std::vector<Var> gathered;
  for (const Var& x : xs) gathered.push_back(x.defined() ? gather_tokens(x, layout.index) : Var());
  d.T = layout.index.size(1);
  d.chunk_size = chunk;
  d.chunk_reset = layout.chunk_reset.data<int32_t>();
  std::vector<Var> outs = run(d, gathered, layout.chunk_reset);
  for (size_t i = 0; i < token_outputs; i++) outs[i] = scatter_tokens(outs[i], layout.index, T);
  return outs;
}

namespace cpu {
// out: (B, Tp, inner); x: (B, T, inner); index: (B, Tp)
template <class Real>
void gather_tokens_forward(Real* out, const Real* x, const int32_t* index, int64_t B, int64_t T, int64_t Tp,
                           int64_t inner);
// out: (B, T, inner), every element written; y: (B, Tp, inner); index: (B, Tp)
template <class Real>
void scatter_tokens_forward(Real* out, const Real* y, const int32_t* index, int64_t B, int64_t T, int64_t Tp,
                            int64_t inner);
}  // namespace cpu

}  // namespace hla
