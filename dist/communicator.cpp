// The Tensor forms of the collectives (dist/communicator.h).
#include "dist/communicator.h"

namespace hla::dist {

namespace {

void check_on_device(const Communicator& comm, const Tensor& t, const char* op) {
  HLA_CHECK(t.defined(), op, ": the tensor is undefined");
  HLA_CHECK(t.device() == comm.device(), op, ": tensor ", t.str(), " is not on the communicator's device (",
            comm.device() == Device::CUDA ? "cuda" : "cpu", ")");
}

}  // namespace

void all_reduce_(Communicator& comm, Tensor& t, ReduceOp op) {
  check_on_device(comm, t, "all_reduce_");
  comm.all_reduce(t.raw(), t.numel(), t.dtype(), op);
}

void broadcast_(Communicator& comm, Tensor& t, int root) {
  check_on_device(comm, t, "broadcast_");
  comm.broadcast(t.raw(), t.numel(), t.dtype(), root);
}

}  // namespace hla::dist
