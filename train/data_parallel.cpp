// The data-parallel split of an update's batch (train/data_parallel.h).
#include "train/data_parallel.h"

#include <cstring>
#include <sstream>

#include "train/documents.h"

namespace hla {

std::string RankShare::describe() const {
  std::ostringstream os;
  os << sequences << " sequences per rank and update (" << grad_accum << " x " << micro_batch << ")";
  return os.str();
}

RankShare rank_share(int64_t batch_size, int64_t grad_accum, int world) {
  HLA_CHECK_INPUT(world >= 1, "--gpus must be >= 1, got ", world);
  const int64_t total = batch_size * grad_accum;
  HLA_CHECK_INPUT(total % world == 0, "--gpus ", world, ": an update's ", total, " sequences ([data] batch_size ",
                  batch_size, " x [train] grad_accum ", grad_accum, ") do not split evenly over ", world,
                  " ranks; make batch_size x grad_accum a multiple of ", world);
  RankShare share;
  share.sequences = total / world;
  share.micro_batch = std::min(batch_size, share.sequences);
  while (share.sequences % share.micro_batch != 0) share.micro_batch--;
  share.grad_accum = share.sequences / share.micro_batch;
  return share;
}

std::vector<TrainBatch> rank_micro_batches(const std::vector<TrainBatch>& update, const RankShare& share, int rank) {
  HLA_CHECK(!update.empty(), "rank_micro_batches: no micro-batch");
  const int64_t T = update[0].ids.size(1);
  // pass 1: this rank's rows, in the order of the update's sequences (and their document
  // boundaries, cu_seqlens without the final total)
  const bool documents = !update[0].cu_seqlens.empty();
  std::vector<int32_t> ids, targets;
  std::vector<int64_t> cu_seqlens;
  const int64_t first = rank * share.sequences, last = first + share.sequences;
  int64_t row = 0;  // index of the update's sequence at the start of batch b
  for (const TrainBatch& b : update) {
    const int64_t B = b.ids.size(0);
    HLA_CHECK(b.ids.size(1) == T, "rank_micro_batches: micro-batches of ", T, " and ", b.ids.size(1), " tokens");
    const int64_t lo = std::max(first, row), hi = std::min(last, row + B);
    if (lo < hi) {
      const int32_t* bi = b.ids.data<int32_t>() + (lo - row) * T;      // bi: (hi - lo, T)
      const int32_t* bt = b.targets.data<int32_t>() + (lo - row) * T;  // bt: (hi - lo, T)
      if (documents) {
        const std::vector<int64_t> part = slice_cu_seqlens(b.cu_seqlens, (lo - row) * T, (hi - row) * T);
        for (size_t k = 0; k + 1 < part.size(); k++) cu_seqlens.push_back(int64_t(ids.size()) + part[k]);
      }
      ids.insert(ids.end(), bi, bi + (hi - lo) * T);
      targets.insert(targets.end(), bt, bt + (hi - lo) * T);
    }
    row += B;
  }
  HLA_CHECK(int64_t(ids.size()) == share.sequences * T, "rank_micro_batches: the update holds ", row,
            " sequences, rank ", rank, " needs [", first, ", ", last, ")");
  cu_seqlens.push_back(int64_t(ids.size()));
  // pass 2: micro-batches of share.micro_batch rows
  std::vector<TrainBatch> mine;
  const int64_t rows = share.micro_batch;
  for (int64_t m = 0; m < share.grad_accum; m++) {
    const auto from = ids.begin() + m * rows * T, to = from + rows * T;
    const auto t_from = targets.begin() + m * rows * T, t_to = t_from + rows * T;
    TrainBatch b;
    b.ids = Tensor::from_i32(std::vector<int32_t>(from, to), {rows, T});
    b.targets = Tensor::from_i32(std::vector<int32_t>(t_from, t_to), {rows, T});
    b.valid = count_valid_targets(b.targets);
    if (documents) b.cu_seqlens = slice_cu_seqlens(cu_seqlens, m * rows * T, (m + 1) * rows * T);
    mine.push_back(std::move(b));
  }
  return mine;
}

}  // namespace hla
