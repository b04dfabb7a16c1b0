// Caching allocator, copies and device queries (see runtime.h).
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cuda/runtime.h"

namespace hla::cuda {
namespace {

using FreeLists = std::map<size_t, std::vector<void*>>;  // rounded size -> cached blocks

// The blocks of one captured graph (runtime.h: CUDA graph memory).
struct GraphPool {
  FreeLists free_lists;      // blocks the graph owns that nobody holds now
  std::vector<void*> pinned;  // host buffers of copy_h2d_captured
};

struct Pool {
  std::mutex mu;
  FreeLists free_lists;
  size_t allocated = 0, reserved = 0, peak = 0, mallocs = 0;
  bool poison = false;
  std::map<int, GraphPool> graphs;       // by id, while the graph lives
  std::unordered_map<void*, int> owner;  // block -> the graph that owns it
  int capturing = 0;                     // the pool of the capture in progress (0: none)
  std::thread::id capture_thread;        // the thread whose stream is being captured
  int next_graph = 1;
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

// A cached block of `size` from `lists`, or null.
void* take(FreeLists& lists, size_t size) {
  auto it = lists.find(size);
  if (it == lists.end() || it->second.empty()) return nullptr;
  void* ptr = it->second.back();
  it->second.pop_back();
  return ptr;
}

// The pool of the capture this thread runs, or null (p.mu held).
GraphPool* capture_pool(Pool& p) {
  if (p.capturing == 0 || std::this_thread::get_id() != p.capture_thread) return nullptr;
  return &p.graphs.at(p.capturing);
}

}  // namespace

void* device_alloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  size_t size = round_size(bytes);
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  GraphPool* graph = capture_pool(p);
  void* ptr = graph ? take(graph->free_lists, size) : nullptr;  // the graph's own block: already counted
  if (ptr) return ptr;
  ptr = take(p.free_lists, size);
  if (!ptr) {
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
  if (graph) p.owner[ptr] = p.capturing;
  if (p.poison) CUDA_CHECK(cudaMemsetAsync(ptr, 0xFF, size, 0));  // stream-ordered: capturable
  return ptr;
}

void device_free(void* ptr, size_t bytes) {
  if (!ptr) return;
  size_t size = round_size(bytes == 0 ? 1 : bytes);
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  auto owned = p.owner.find(ptr);
  if (owned != p.owner.end()) {  // the graph replays into it: it stays the graph's
    p.graphs.at(owned->second).free_lists[size].push_back(ptr);
    return;
  }
  if (GraphPool* graph = capture_pool(p)) {  // allocated before the capture, read by the captured work
    p.owner[ptr] = p.capturing;
    graph->free_lists[size].push_back(ptr);
    return;
  }
  p.free_lists[size].push_back(ptr);
  p.allocated -= size;
}

int begin_graph_memory() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  HLA_CHECK(p.capturing == 0, "cuda allocator: a graph capture began while graph pool ", p.capturing,
            " is still capturing");
  const int id = p.next_graph++;
  p.graphs[id];
  p.capturing = id;
  p.capture_thread = std::this_thread::get_id();
  return id;
}

void end_graph_capture(int memory) {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  HLA_CHECK(p.capturing == memory, "cuda allocator: end of capture for graph pool ", memory, ", but pool ",
            p.capturing, " is capturing");
  p.capturing = 0;
}

void release_graph_memory(int memory) {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  auto graph = p.graphs.find(memory);
  if (graph == p.graphs.end()) return;
  if (p.capturing == memory) p.capturing = 0;
  for (auto it = p.owner.begin(); it != p.owner.end();)
    it = it->second == memory ? p.owner.erase(it) : std::next(it);
  for (auto& [size, blocks] : graph->second.free_lists)
    for (void* b : blocks) {
      p.free_lists[size].push_back(b);
      p.allocated -= size;
    }
  for (void* host : graph->second.pinned) (void)cudaFreeHost(host);  // called from destructors: no throw
  p.graphs.erase(graph);
}

bool capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(cudaStreamPerThread, &status));
  return status != cudaStreamCaptureStatusNone;
}

void check_not_capturing(const char* what, size_t bytes) {
  if (!capturing()) return;
  fail("cuda graph capture: ", what, " (", bytes, " bytes) cannot be captured: a graph replays device work only, ",
       "so a host read, a blocking copy, a synchronize or an upload of per-step data inside it would be skipped ",
       "or replay stale bytes. The op that called it runs a host step inside the captured region; train with ",
       "--train.cuda_graph false (or decode with --no-cuda-graph) until it is stream-ordered");
}

void copy_h2d_captured(void* dst, const void* src, size_t bytes) {
  HLA_CHECK(capturing(), "copy_h2d_captured: hla's stream is not being captured");
  void* host = nullptr;
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    GraphPool* graph = capture_pool(p);
    HLA_CHECK(graph, "copy_h2d_captured: the capture on this thread has no graph pool (cuda/graph.h begins one)");
    CUDA_CHECK(cudaMallocHost(&host, bytes));
    graph->pinned.push_back(host);
  }
  std::memcpy(host, src, bytes);
  CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, 0));
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
  check_not_capturing("release_cached, cudaFree of the cached blocks", p.reserved);
  CUDA_CHECK(cudaDeviceSynchronize());
  for (auto& [size, blocks] : p.free_lists)
    for (void* b : blocks) { CUDA_CHECK(cudaFree(b)); p.reserved -= size; }
  p.free_lists.clear();
}

void copy_h2d(void* dst, const void* src, size_t bytes) {
  check_not_capturing("copy_h2d, a blocking host-to-device copy", bytes);
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
// Counted by host_syncs(); atomic: copies may come from several host threads.
namespace {
std::atomic<size_t> host_sync_count{0};
}  // namespace
size_t host_syncs() { return host_sync_count.load(); }
void count_host_sync() { host_sync_count++; }

void copy_d2h(void* dst, const void* src, size_t bytes) {
  check_not_capturing("copy_d2h, a host read of device memory", bytes);
  host_sync_count++;
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
// Device-to-device copies and memsets never block the host, so they can be stream-ordered
// (Async on stream 0, the per-thread default stream in this build) and captured into a graph.
void copy_d2d(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
}
void memset_zero(void* ptr, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, 0)); }
namespace {

struct SideStream {
  cudaStream_t stream;
  cudaEvent_t fork, join;
  SideStream() {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  }
};

SideStream& side_stream() {
  thread_local SideStream s;  // hla's stream is per thread, so is its side stream
  return s;
}

}  // namespace

cudaStream_t fork_side_stream() {
  SideStream& s = side_stream();
  CUDA_CHECK(cudaEventRecord(s.fork, cudaStreamPerThread));
  CUDA_CHECK(cudaStreamWaitEvent(s.stream, s.fork, 0));
  return s.stream;
}

void join_side_stream() {
  SideStream& s = side_stream();
  CUDA_CHECK(cudaEventRecord(s.join, s.stream));
  CUDA_CHECK(cudaStreamWaitEvent(cudaStreamPerThread, s.join, 0));
}

void synchronize() {
  check_not_capturing("synchronize, a host wait for the device", 0);
  host_sync_count++;
  CUDA_CHECK(cudaDeviceSynchronize());
}

AsyncRead::AsyncRead(size_t bytes) : bytes_(bytes) {
  CUDA_CHECK(cudaMallocHost(&host_, bytes));
  cudaEvent_t copied = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
  copied_ = copied;
}

AsyncRead::~AsyncRead() {  // no throw: a trainer may be destroyed while an error unwinds
  if (in_flight_) (void)cudaEventSynchronize(static_cast<cudaEvent_t>(copied_));  // the copy still writes host_
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(copied_));
  (void)cudaFreeHost(host_);
}

void AsyncRead::start(const void* device_src) {
  HLA_CHECK(!in_flight_, "AsyncRead::start: the previous read of ", bytes_, " bytes was not waited for; its ",
            "buffer would be overwritten before it is read");
  check_not_capturing("AsyncRead::start, a device-to-host read", bytes_);
  CUDA_CHECK(cudaMemcpyAsync(host_, device_src, bytes_, cudaMemcpyDeviceToHost, cudaStreamPerThread));
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(copied_), cudaStreamPerThread));
  in_flight_ = true;
}

const void* AsyncRead::wait() {
  HLA_CHECK(in_flight_, "AsyncRead::wait: no read of ", bytes_, " bytes was started");
  host_sync_count++;
  CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(copied_)));
  in_flight_ = false;
  return host_;
}

StreamMark::StreamMark() {
  cudaEvent_t event = nullptr;
  CUDA_CHECK(cudaEventCreate(&event));
  event_ = event;
}

StreamMark::~StreamMark() { (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_)); }

void StreamMark::record() {
  check_not_capturing("StreamMark::record, a timing event", 0);
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), cudaStreamPerThread));
}

double StreamMark::ms_since(const StreamMark& earlier) const {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(earlier.event_), static_cast<cudaEvent_t>(event_)));
  return ms;
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
