// Caching allocator, copies and device queries (see runtime.h).
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "cuda/runtime.h"

namespace hla::cuda {
namespace {

struct Pool {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free_lists;  // rounded size -> cached blocks
  size_t allocated = 0, reserved = 0, peak = 0, mallocs = 0;
  bool poison = false;
  bool holding = false;                        // begin_hold .. end_hold
  std::vector<std::pair<void*, size_t>> held;  // blocks freed while holding
};
Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: blocks may be freed during static teardown
  return *p;
}

size_t round_size(size_t bytes) {
  const size_t small = 512, large = 2u << 20;
  if (bytes < (1u << 20)) return (bytes + small - 1) / small * small;
  return (bytes + large - 1) / large * large;
}

}  // namespace

void* device_alloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  size_t size = round_size(bytes);
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  void* ptr = nullptr;
  auto it = p.free_lists.find(size);
  if (it != p.free_lists.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
  } else {
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err != cudaSuccess) {  // free the cache once and retry before giving up
      (void)cudaGetLastError();
      for (auto& [sz, blocks] : p.free_lists)
        for (void* b : blocks) { cudaFree(b); p.reserved -= sz; }
      p.free_lists.clear();
      CUDA_CHECK(cudaMalloc(&ptr, size));
    }
    p.reserved += size;
    p.mallocs++;
  }
  p.allocated += size;
  if (p.allocated > p.peak) p.peak = p.allocated;
  if (p.poison) CUDA_CHECK(cudaMemset(ptr, 0xFF, size));
  return ptr;
}

void device_free(void* ptr, size_t bytes) {
  if (!ptr) return;
  size_t size = round_size(bytes == 0 ? 1 : bytes);
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.holding) {
    p.held.push_back({ptr, size});
    return;
  }
  p.free_lists[size].push_back(ptr);
  p.allocated -= size;
}

void begin_hold() {
  std::lock_guard<std::mutex> lock(pool().mu);
  HLA_CHECK(!pool().holding, "cuda allocator: begin_hold while already holding");
  pool().holding = true;
}

std::vector<std::pair<void*, size_t>> end_hold() {
  std::lock_guard<std::mutex> lock(pool().mu);
  pool().holding = false;
  std::vector<std::pair<void*, size_t>> blocks;
  blocks.swap(pool().held);
  return blocks;
}

void release_held(const std::vector<std::pair<void*, size_t>>& blocks) {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  for (const auto& [ptr, size] : blocks) {
    p.free_lists[size].push_back(ptr);
    p.allocated -= size;
  }
}

void set_poison_allocations(bool on) {
  std::lock_guard<std::mutex> lock(pool().mu);
  pool().poison = on;
}

size_t allocated_bytes() { return pool().allocated; }
size_t reserved_bytes() { return pool().reserved; }
size_t peak_bytes() { return pool().peak; }
void reset_peak_bytes() { pool().peak = pool().allocated; }
size_t cuda_malloc_calls() { return pool().mallocs; }

void release_cached() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  CUDA_CHECK(cudaDeviceSynchronize());
  for (auto& [size, blocks] : p.free_lists)
    for (void* b : blocks) { CUDA_CHECK(cudaFree(b)); p.reserved -= size; }
  p.free_lists.clear();
}

void copy_h2d(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
// Counted by host_syncs(); atomic: copies may come from several host threads.
namespace {
std::atomic<size_t> host_sync_count{0};
}  // namespace
size_t host_syncs() { return host_sync_count.load(); }
void count_host_sync() { host_sync_count++; }

void copy_d2h(void* dst, const void* src, size_t bytes) {
  host_sync_count++;
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
// Device-to-device copies and memsets never block the host, so they can be stream-ordered
// (Async on stream 0, the per-thread default stream in this build) and captured into a graph.
void copy_d2d(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
}
void memset_zero(void* ptr, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, 0)); }
void synchronize() {
  host_sync_count++;
  CUDA_CHECK(cudaDeviceSynchronize());
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

}  // namespace hla::cuda
