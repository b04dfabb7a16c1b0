// Gradient buckets: the data-parallel gradient all-reduce, overlapped with the backward.
//
// The parameters are grouped into buckets of at most bucket_mb MB (a larger parameter is a
// bucket of its own; a bucket holds one dtype), walking them in reverse registration order,
// the order in which a backward completes their gradients (the head's first, the embedding's
// last). Each bucket owns one flat buffer. During the last backward of an update the autograd
// engine reports each leaf whose gradient is complete (Var::backward's on_leaf_ready, hook());
// when every member of a bucket is complete, its gradients are copied into the flat buffer and
// its all-reduce (sum) is issued: on the GPU on the communicator's stream, so it runs while
// the backward goes on. Buckets are issued in bucket order on every rank (the collectives must
// come in the same order on every rank): a bucket that completes before an earlier one waits
// for it. finish() issues the buckets the backward did not complete (a parameter with no
// gradient this update adds zeros), makes hla's stream wait for every all-reduce, and points
// every parameter's gradient at its reduced slice of the flat buffer, so gradient clipping and
// the optimizer step see the reduced gradients.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "dist/communicator.h"
#include "nn/module.h"

namespace hla::dist {

struct Bucket {
  std::vector<size_t> members;   // indices into the parameter list, in completion order
  std::vector<int64_t> offsets;  // of each member in flat
  Tensor flat;                   // (numel of all members)
  size_t ready = 0;              // members complete in this backward
};

class GradBuckets {
 public:
  GradBuckets(const ParameterList& params, Communicator& comm, double bucket_mb);

  // The hook for the last backward of an update (Var::backward's on_leaf_ready).
  LeafReadyFn hook();
  void leaf_ready(const Var& leaf);
  // Issues what is left, waits (hla's stream) and hands the reduced gradients to the parameters.
  void finish();

  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void issue_ready_buckets();
  void issue(Bucket& bucket);

  ParameterList params_;
  Communicator& comm_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const VarImpl*, std::pair<size_t, size_t>> where_;  // leaf -> (parameter, bucket)
  std::vector<bool> complete_;  // per parameter, in this backward
  size_t next_to_issue_ = 0;
};

}  // namespace hla::dist
