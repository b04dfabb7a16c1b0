// What the trainer and the evaluator need from a model: named parameters and a loss.
// HybridLM (nn/model.h) implements it; tests implement it with tiny models.
#pragma once
#include <string>
#include <vector>

#include "autograd/var.h"
#include "nn/ops/document_chunks.h"

namespace hla {

struct NamedParameter {
  std::string name;  // fla name, e.g. "model.layers.3.attn.q_proj.weight"
  Var var;           // a leaf with requires_grad; updated in place by optimizers
  // var's value in the forward's dtype where that differs from the master's (bf16 from fp32
  // master weights, nn/layers/params.h), read by every forward instead of a cast per use;
  // undefined where the forward reads var itself. It holds exactly the cast of var: every write
  // to var writes it too, the optimizer's update in the same kernel, any other write (a weights
  // load, ZeRO's gather) through refresh_compute_copy().
  Tensor compute_copy;
  void refresh_compute_copy() const {
    if (!compute_copy.defined()) return;
    Tensor copy = compute_copy;  // a handle on the same storage
    copy.copy_(var.value().to(copy.dtype()));
  }
};
using ParameterList = std::vector<NamedParameter>;

// Packed documents (varlen) for a model that takes them natively: doc_start, the first token of
// each token's document, and positions, each token's place in it; (B, T) I32 on the model's
// device (nn/ops/attention.h: document_starts, document_positions). doc_start carries the chunk
// layouts of the chunked recurrences, built once per batch (nn/ops/document_chunks.h).
struct Documents {
  DocumentStarts doc_start;
  Tensor positions;
};

class TrainableModel {
 public:
  virtual ~TrainableModel() = default;
  // ids, targets: (B, T) I32 on the model's device; targets use kIgnoreIndex (-100) for
  // positions without loss. Returns the mean cross-entropy over non-ignored targets.
  virtual Var loss(const Tensor& ids, const Tensor& targets) = 0;
  // Whether the model takes packed documents natively: every sequence op of it stops at a
  // document start (every HybridLM, nn/model.h). Otherwise the trainer gives each document
  // fragment a row of its own, padded (train/documents.h).
  virtual bool takes_documents() const { return false; }
  // The loss with each document of the rows as if alone; only where takes_documents().
  virtual Var loss_in_documents(const Tensor& ids, const Tensor& targets, const Documents& documents) {
    fail("this model does not take packed documents natively (takes_documents() is false)");
  }
  // ids: (B, T) -> logits (B, T, V)
  virtual Var logits(const Tensor& ids) = 0;
  // The logits with each document as if alone; only where takes_documents().
  virtual Var logits_in_documents(const Tensor& ids, const Documents& documents) {
    fail("this model does not take packed documents natively (takes_documents() is false)");
  }
  virtual ParameterList parameters() = 0;
  virtual Device device() const = 0;
};

// Total number of scalar parameters.
inline int64_t count_parameters(const ParameterList& params) {
  int64_t n = 0;
  for (const auto& p : params) n += p.var.numel();
  return n;
}

}  // namespace hla
