// Document boundaries of packed windows and their padded rows (train/documents.h).
#include "train/documents.h"

#include <algorithm>

#include "nn/ops/attention.h"
#include "tensor/ignore_index.h"

namespace hla {

std::vector<int64_t> document_cu_seqlens(const Tensor& ids, int32_t eos) {
  HLA_CHECK(ids.dim() == 2 && ids.dtype() == DType::I32, "document_cu_seqlens: ids must be (B, T) I32, got ",
            ids.str());
  const int64_t B = ids.size(0), T = ids.size(1);
  const int32_t* tokens = ids.data<int32_t>();  // tokens: (B, T)
  std::vector<int64_t> cu_seqlens;
  for (int64_t i = 0; i < B * T; i++)
    if (i % T == 0 || tokens[i] == eos) cu_seqlens.push_back(i);
  cu_seqlens.push_back(B * T);
  return cu_seqlens;
}

std::vector<int64_t> slice_cu_seqlens(const std::vector<int64_t>& cu_seqlens, int64_t from, int64_t to) {
  const auto first = std::lower_bound(cu_seqlens.begin(), cu_seqlens.end(), from);
  const auto last = std::lower_bound(cu_seqlens.begin(), cu_seqlens.end(), to);
  HLA_CHECK(first != cu_seqlens.end() && *first == from && last != cu_seqlens.end() && *last == to,
            "slice_cu_seqlens: tokens [", from, ", ", to, ") do not start and end at document boundaries");
  std::vector<int64_t> sliced;
  for (auto it = first; it != last; ++it) sliced.push_back(*it - from);
  sliced.push_back(to - from);
  return sliced;
}

namespace {

// b's fragments as the first rows of an (N, Tmax) batch; the rest is padding.
TrainBatch padded_fragments(const TrainBatch& b, int64_t N, int64_t Tmax) {
  const std::vector<int64_t>& cu = b.cu_seqlens;
  const int32_t* ids = b.ids.data<int32_t>();          // ids: (B, T)
  const int32_t* targets = b.targets.data<int32_t>();  // targets: (B, T)
  std::vector<int32_t> row_ids(size_t(N * Tmax), 0);                 // row_ids: (N, Tmax)
  std::vector<int32_t> row_targets(size_t(N * Tmax), kIgnoreIndex);  // row_targets: (N, Tmax)
  for (size_t f = 0; f + 1 < cu.size(); f++) {
    std::copy(ids + cu[f], ids + cu[f + 1], row_ids.begin() + int64_t(f) * Tmax);
    std::copy(targets + cu[f], targets + cu[f + 1], row_targets.begin() + int64_t(f) * Tmax);
  }
  TrainBatch rows;
  rows.ids = Tensor::from_i32(row_ids, {N, Tmax});
  rows.targets = Tensor::from_i32(row_targets, {N, Tmax});
  rows.valid = b.valid;
  rows.cu_seqlens = cu;
  return rows;
}

}  // namespace

std::vector<TrainBatch> document_rows(const std::vector<TrainBatch>& update) {
  HLA_CHECK(!update.empty(), "document_rows: no micro-batch");
  const bool documents = !update[0].cu_seqlens.empty();
  int64_t N = 0, Tmax = 0;  // the update's largest fragment count and fragment length
  for (const TrainBatch& b : update) {
    HLA_CHECK(b.cu_seqlens.empty() != documents, "document_rows: an update mixes micro-batches with and without ",
              "document boundaries");
    const std::vector<int64_t>& cu = b.cu_seqlens;
    N = std::max(N, int64_t(cu.size()) - 1);
    for (size_t f = 0; f + 1 < cu.size(); f++) Tmax = std::max(Tmax, cu[f + 1] - cu[f]);
  }
  if (!documents) return update;
  std::vector<TrainBatch> rows;
  for (const TrainBatch& b : update) rows.push_back(padded_fragments(b, N, Tmax));
  return rows;
}

bool native_documents(const TrainableModel& model, const std::vector<TrainBatch>& update) {
  HLA_CHECK(!update.empty(), "native_documents: no micro-batch");
  return model.takes_documents() && !update[0].cu_seqlens.empty();
}

std::vector<TrainBatch> training_rows(const TrainableModel& model, const std::vector<TrainBatch>& update) {
  return native_documents(model, update) ? update : document_rows(update);
}

std::vector<Documents> update_documents(const TrainableModel& model, const std::vector<TrainBatch>& update) {
  std::vector<Documents> documents;
  if (!native_documents(model, update)) return documents;
  for (const TrainBatch& b : update) {
    const Tensor starts = document_starts(b.cu_seqlens, b.ids.size(0), b.ids.size(1));
    // doc_start with its host copy: the chunk layouts need no copy back
    documents.push_back({DocumentStarts(starts.to(model.device()), starts),
                         document_positions(starts).to(model.device())});
  }
  return documents;
}

double padding_overhead(const std::vector<TrainBatch>& rows, const std::vector<TrainBatch>& packed) {
  int64_t padded = 0, real = 0;
  for (const TrainBatch& b : rows) padded += b.ids.numel();
  for (const TrainBatch& b : packed) real += b.ids.numel();
  return real > 0 ? double(padded - real) / double(real) : 0.0;
}

}  // namespace hla
