// ZeRO-1 ([train] zero = 1): the optimizer state sharded over the data-parallel ranks.
//
// Granularity is the whole parameter tensor, for AdamW and Muon alike: each tensor is updated by
// one rank, its owner (assign_owners: largest tensors first, each to the rank with the fewest
// elements so far, ties to the lower rank: the same on every rank, about 1/N of the state each).
// Every rank still holds every parameter and every reduced gradient (ZeRO-1 shards only the
// state), computes the same clip factor, and its optimizer (Optimizer's `updates` flags) updates
// the tensors it owns with the same math as plain data parallelism; then gather_parameters()
// brings every rank the owners' new values in one all_gather (each rank's tensors packed in one
// flat shard, padded to the longest). So a ZeRO-1 run is bit-identical to plain data
// parallelism, and Muon needs nothing more (a matrix is orthogonalised whole by its owner).
// Checkpoints stay one file: gather_state() collects every tensor's state from its owner (one
// broadcast per tensor, at saves only); a resume loads each rank's part of that file.
#pragma once
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "nn/module.h"
#include "train/optim.h"

namespace hla {

// Per parameter, the rank that updates it.
std::vector<int> assign_owners(const ParameterList& params, int world);

class ZeroShards {
 public:
  ZeroShards(const ParameterList& params, dist::Communicator& comm);
  const std::vector<bool>& owned() const { return owned_; }  // per parameter: by this rank
  // After the owners' updates: every parameter as its owner made it, on every rank.
  void gather_parameters();
  // Every parameter's optimizer state, in Optimizer::state() order, on every rank (collective).
  NamedTensors gather_state(const Optimizer& optimizer) const;
  std::string describe() const;

 private:
  ParameterList params_;
  dist::Communicator& comm_;
  std::vector<int> owner_;
  std::vector<bool> owned_;
  std::vector<std::vector<size_t>> by_rank_;  // the parameters each rank owns, in order
  int64_t shard_numel_ = 0;                   // the longest rank's elements: the padded shard
  Tensor send_, recv_;                        // (shard_numel_), (world, shard_numel_)
};

}  // namespace hla
