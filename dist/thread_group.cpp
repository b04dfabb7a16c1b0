// The in-process communicator of the CPU tests (dist/thread_group.h).
#include "dist/thread_group.h"

#include <cstring>
#include <exception>
#include <thread>

#include "tensor/dispatch.h"

namespace hla::dist {

ThreadGroup::ThreadGroup(int world) : world_(world), posted_(world, nullptr), called_(world) {
  HLA_CHECK(world >= 1, "ThreadGroup: world must be >= 1, got ", world);
}

void ThreadGroup::arrive() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted_) fail("thread group: another rank failed");
  const int64_t generation = generation_;
  if (++arrived_ == world_) {
    arrived_ = 0;
    generation_++;
    changed_.notify_all();
    return;
  }
  changed_.wait(lock, [&] { return generation_ != generation || aborted_; });
  if (generation_ == generation) fail("thread group: another rank failed");
}

void ThreadGroup::abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = true;
  changed_.notify_all();
}

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return group_.world(); }
  Device device() const override { return Device::CPU; }
  std::string describe() const override {
    return "threads: rank " + std::to_string(rank_) + " of " + std::to_string(world()) + " (CPU test group)";
  }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    std::vector<char> result = reduce("all_reduce", data, 0, count, dtype, op);
    group_.arrive();  // every rank has read every buffer before any is written
    std::memcpy(data, result.data(), result.size());
  }

  void broadcast(void* data, int64_t count, DType dtype, int root) override {
    check_root(root);
    const size_t bytes = size_t(count) * dtype_size(dtype);
    post("broadcast", data, count, dtype);
    const char* from = static_cast<const char*>(group_.posted_[root]);
    std::vector<char> copy(from, from + bytes);
    group_.arrive();
    std::memcpy(data, copy.data(), bytes);
  }

  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    const size_t bytes = size_t(count) * dtype_size(dtype);
    post("all_gather", send, count, dtype);
    for (int r = 0; r < world(); r++)
      std::memcpy(static_cast<char*>(recv) + r * bytes, group_.posted_[r], bytes);
    group_.arrive();
  }

  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    std::vector<char> result = reduce("reduce_scatter", send, rank_ * count, count, dtype, op);
    group_.arrive();
    std::memcpy(recv, result.data(), result.size());
  }

  void wait() override {}
  void barrier() override {
    post("barrier", nullptr, 0, DType::F32);
    group_.arrive();  // every rank has checked the posts before any is posted again
  }

 private:
  void check_root(int root) const {
    HLA_CHECK(root >= 0 && root < world(), "broadcast: root ", root, " is not a rank of ", world());
  }
  // Posts this rank's buffer, waits for every rank's, and checks they all called the same.
  void post(const char* collective, const void* buffer, int64_t count, DType dtype) {
    group_.posted_[rank_] = buffer;
    group_.called_[rank_] = std::string(collective) + " of " + std::to_string(count) + " " + dtype_name(dtype);
    group_.arrive();
    for (int r = 0; r < world(); r++)
      if (group_.called_[r] != group_.called_[rank_])
        fail("thread group: rank ", rank_, " called ", group_.called_[rank_], " while rank ", r, " called ",
             group_.called_[r], ": the ranks issue their collectives in different orders");
  }
  // Elements [offset, offset + count) of every rank's posted buffer, combined in rank order.
  std::vector<char> reduce(const char* collective, const void* own, int64_t offset, int64_t count, DType dtype,
                           ReduceOp op) {
    post(collective, own, count, dtype);
    std::vector<char> result(size_t(count) * dtype_size(dtype));
    dispatch_float(dtype, "thread group all_reduce", [&](auto tag) {
      using T = decltype(tag);
      T* out = reinterpret_cast<T*>(result.data());  // out: (count)
      for (int64_t i = 0; i < count; i++) {
        T sum = static_cast<const T*>(group_.posted_[0])[offset + i];
        for (int r = 1; r < world(); r++) sum += static_cast<const T*>(group_.posted_[r])[offset + i];
        out[i] = op == ReduceOp::Avg ? sum / static_cast<T>(world()) : sum;
      }
    });
    return result;
  }

  ThreadGroup& group_;
  int rank_;
};

std::unique_ptr<Communicator> ThreadGroup::communicator(int rank) {
  HLA_CHECK(rank >= 0 && rank < world_, "ThreadGroup: rank ", rank, " is not in [0, ", world_, ")");
  return std::make_unique<ThreadCommunicator>(*this, rank);
}

void ThreadGroup::run(int world, const std::function<void(Communicator& comm)>& body) {
  ThreadGroup group(world);
  std::exception_ptr first_error;  // the rank that failed first, not the others it stopped
  std::mutex error_mutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; r++)
    threads.emplace_back([&, r] {
      try {
        auto comm = group.communicator(r);
        body(*comm);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        group.abort();
      }
    });
  for (std::thread& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace hla::dist
