// Communicator: what data parallelism needs from a group of ranks (one per GPU), and two
// implementations of it:
//   - NCCL (dist/nccl/nccl_communicator.cpp, compiled only when CMake finds NCCL: HLA_NCCL),
//     one process per GPU;
//   - threads (dist/thread_group.h): N ranks as N threads of one process sharing memory, for the
//     CPU tests; sums run in rank order 0, 1, ..., N-1, so every rank gets the same bits and a
//     run is deterministic.
// Collectives are issued in the same order on every rank (NCCL's rule). On the GPU they run on
// the communicator's own stream, each after everything hla's stream had queued when it was
// issued, so a bucket's all-reduce overlaps the rest of the backward; wait() makes hla's stream
// wait for them (the host does not block). On the CPU they run at once.
// Shapes: count elements per rank; all_gather's recv and reduce_scatter's send hold world * count,
// rank r's part at [r * count, (r + 1) * count).
#pragma once
#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace hla::dist {

enum class ReduceOp { Sum, Avg };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual Device device() const = 0;  // where the buffers live
  virtual std::string describe() const = 0;  // one line for the start-up table

  // data: (count), in place: the op over every rank's data.
  virtual void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  // data: (count): root's data on every rank.
  virtual void broadcast(void* data, int64_t count, DType dtype, int root) = 0;
  // send: (count), recv: (world * count): recv[r * count + i] = send of rank r [i].
  virtual void all_gather(const void* send, void* recv, int64_t count, DType dtype) = 0;
  // send: (world * count), recv: (count): recv[i] = op over ranks r of send of r [rank * count + i].
  virtual void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) = 0;
  // hla's stream waits for every collective issued so far.
  virtual void wait() = 0;
  // The host waits until every rank got here and this rank's collectives are done.
  virtual void barrier() = 0;
};

// The Tensor forms: contiguous tensors on the communicator's device, same shape on every rank.
void all_reduce_(Communicator& comm, Tensor& t, ReduceOp op);
void broadcast_(Communicator& comm, Tensor& t, int root);

}  // namespace hla::dist
