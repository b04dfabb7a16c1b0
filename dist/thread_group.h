// N ranks as N threads of one process (dist/communicator.h): the CPU stand-in for NCCL that the
// data-parallel tests run on. Every collective is a rendezvous: each rank posts its buffer, all
// wait, each computes the result from every rank's buffer in rank order 0, 1, ..., N-1 (so the
// bits are the same on every rank and in every run), all wait again, each writes its own
// output. A rank that throws stops the group: the others' next collective throws too instead
// of waiting forever. Every rank checks that all called the same collective with the same count
// and dtype (collectives issued in different orders on different ranks are an error, naming both).
// F32 and F64 buffers, CPU memory.
#pragma once
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "dist/communicator.h"

namespace hla::dist {

class ThreadGroup {
 public:
  explicit ThreadGroup(int world);
  int world() const { return world_; }
  std::unique_ptr<Communicator> communicator(int rank);

  // Runs body(comm) on `world` threads, one per rank; rethrows the first rank's error.
  static void run(int world, const std::function<void(Communicator& comm)>& body);

 private:
  friend class ThreadCommunicator;
  // Waits for every rank; throws when a rank failed.
  void arrive();
  void abort();

  int world_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<const void*> posted_;  // per rank: the buffer of the collective in progress
  std::vector<std::string> called_;  // per rank: which collective, elements and dtype
};

}  // namespace hla::dist
