// How data parallelism splits an update's batch over the ranks, so that --gpus N trains on
// exactly the sequences --gpus 1 trains on at every step.
//
// One update takes grad_accum micro-batches of batch_size sequences from the data source: S =
// grad_accum * batch_size sequences, in the order one GPU sees them. Every rank reads that same
// stream (the data position is the same on every rank, and a resume with another N is exact in
// data); rank r trains on sequences [r S/N, (r+1) S/N), in micro-batches of the largest size
// <= batch_size that divides S/N (so a rank never holds more than one GPU's micro-batch, and
// its grad_accum grows where batch_size / N is not whole). Each micro-batch's loss is weighted
// by its valid targets over those of all S sequences, and the gradients are summed over the
// ranks: the gradient of the one-GPU update, up to the order of float sums.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/data_source.h"

namespace hla {

struct RankShare {
  int64_t sequences = 0;    // S / N: per rank and update
  int64_t micro_batch = 0;  // sequences per micro-batch on a rank
  int64_t grad_accum = 0;   // micro-batches per update on a rank
  std::string describe() const;
};

// An error naming [data] batch_size, [train] grad_accum and --gpus when S is not a multiple of N.
RankShare rank_share(int64_t batch_size, int64_t grad_accum, int world);

// The micro-batches of `rank`: its rows of the update's micro-batches `update` (each (B, T)),
// with their document boundaries (cu_seqlens) when the update has them.
std::vector<TrainBatch> rank_micro_batches(const std::vector<TrainBatch>& update, const RankShare& share, int rank);

}  // namespace hla
