// Document-aware training ([data] documents = "reset"): every document of a packed (B, T)
// window trains as if it were its own sequence, from a zero state, with its own RoPE positions
// and no attention across documents, as fla's varlen (cu_seqlens) training does.
//
// hla's token streams put the tokenizer's EOS before every document (data/prepare.h), so a
// document is "EOS text": a document starts at each EOS of a row and at the row's first token.
// (Splitting after the EOS instead would make each EOS, with the previous document in its state,
// predict the next document's first token: a prediction across the boundary.)
//
// The boundaries travel with the batch as cu_seqlens (fla's name): the offsets, in the row-major
// order of the B * T tokens, of every document fragment's first token, then B * T. Every row
// start is one, so a fragment never spans two rows.
//
// Today's exact construction uses only existing ops: the fragments become the rows of a
// right-padded (N, Tmax) batch whose padded targets are kIgnoreIndex. Every mixer, convolution,
// token shift, RoPE and attention is causal and starts each row from zero, so a fragment's
// outputs are those of the fragment alone, and the padding carries no loss and no gradient; the
// loss stays the mean over the same valid targets.
//
// A model that takes documents natively (TrainableModel::takes_documents: every HybridLM, whose
// kernels stop at document starts) trains on the packed batch itself, with no padding:
// training_rows hands it the windows and update_documents their boundaries (doc_start with its
// host copy, so the chunk layouts need no device sync). Models that do not (the tests' tiny ones)
// pad.
#pragma once
#include <cstdint>
#include <vector>

#include "nn/module.h"
#include "train/data_source.h"

namespace hla {

// cu_seqlens of ids (B, T) I32: the row starts and every position holding `eos`, then B * T.
std::vector<int64_t> document_cu_seqlens(const Tensor& ids, int32_t eos);

// The part of cu_seqlens inside tokens [from, to), shifted to start at 0, then to - from; from
// and to must be offsets in cu_seqlens (row starts are).
std::vector<int64_t> slice_cu_seqlens(const std::vector<int64_t>& cu_seqlens, int64_t from, int64_t to);

// The micro-batches of one update, each with its fragments as rows, right-padded to one shape for
// the whole update (the largest fragment count and length of its micro-batches; the CUDA step
// stages one tensor for all of them): rows past a micro-batch's fragments are all padding. ids
// pad with token 0, targets with kIgnoreIndex; valid and cu_seqlens stay the packed batch's. A
// micro-batch without cu_seqlens comes back as it is; an update mixes no such micro-batches.
std::vector<TrainBatch> document_rows(const std::vector<TrainBatch>& update);

// Whether `model` trains the update's batches as they are, its documents natively: the batches
// carry boundaries and the model takes documents.
bool native_documents(const TrainableModel& model, const std::vector<TrainBatch>& update);
// The rows an update trains as: the packed batches themselves without boundaries or with native
// documents, else document_rows.
std::vector<TrainBatch> training_rows(const TrainableModel& model, const std::vector<TrainBatch>& update);
// The documents of each batch of the update (doc_start and positions from its cu_seqlens) on the
// model's device where native_documents, else none (an empty list).
std::vector<Documents> update_documents(const TrainableModel& model, const std::vector<TrainBatch>& update);

// Padded tokens per real token of `rows` (document_rows' result) over the packed batches
// `packed`: (sum of the rows' numel - sum of the packed numel) / sum of the packed numel.
double padding_overhead(const std::vector<TrainBatch>& rows, const std::vector<TrainBatch>& packed);

}  // namespace hla
