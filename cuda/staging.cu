// Pinned staging ring for host-to-device copies (cuda/staging.h).
#include <cstring>
#include <mutex>

#include "cuda/runtime.h"
#include "cuda/staging.h"

namespace hla::cuda {
namespace {

struct Slot {
  void* host = nullptr;  // pinned
  size_t capacity = 0;
  cudaEvent_t copied = nullptr;  // recorded after the slot's last copy
  bool pending = false;
};

struct Ring {
  std::mutex mu;
  Slot slots[kStagingSlots];
  int next = 0;
};
Ring& ring() {
  static Ring* r = new Ring();  // never destroyed: copies may be queued during static teardown
  return *r;
}

// Waits for the slot's previous copy; counted as a host wait only when it had not finished.
void wait_for(Slot& s) {
  if (!s.pending) return;
  const cudaError_t state = cudaEventQuery(s.copied);
  if (state == cudaErrorNotReady) {
    count_host_sync();
    CUDA_CHECK(cudaEventSynchronize(s.copied));
  } else {
    CUDA_CHECK(state);
  }
  s.pending = false;
}

}  // namespace

void copy_h2d_async(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  // a replay would copy whatever the ring slot holds by then, not this step's bytes
  check_not_capturing("copy_h2d_async, a per-step upload through the pinned staging ring", bytes);
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mu);
  Slot& s = r.slots[r.next];
  r.next = (r.next + 1) % kStagingSlots;
  wait_for(s);
  if (s.capacity < bytes) {
    if (s.host) CUDA_CHECK(cudaFreeHost(s.host));
    CUDA_CHECK(cudaMallocHost(&s.host, bytes));
    s.capacity = bytes;
  }
  if (!s.copied) CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
  std::memcpy(s.host, src, bytes);
  CUDA_CHECK(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, 0));
  CUDA_CHECK(cudaEventRecord(s.copied, 0));
  s.pending = true;
}

}  // namespace hla::cuda
