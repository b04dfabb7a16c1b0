// The CUDA runtime as the rest of hla sees it: a caching allocator, copies, device facts,
// and the error check every CUDA call goes through. Only compiled with HLA_CUDA.
//
// Allocator: size-class free lists (sizes rounded up to 512 B below 1 MiB, to 2 MiB above),
// one stream, so after a warm-up of a few training steps no cudaMalloc happens (the GPU test
// "GPU training allocates nothing after warm-up" in tests/test_gpu_train.cpp reads the counters
// below after every step and checks it). peak_bytes() is the high-water mark of bytes handed out
// (not of bytes reserved) since the last reset_peak_bytes().
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace hla::cuda {

void* device_alloc(size_t bytes);
void device_free(void* ptr, size_t bytes);
size_t allocated_bytes();
size_t reserved_bytes();
size_t peak_bytes();
void reset_peak_bytes();
size_t cuda_malloc_calls();  // how many times the allocator went to cudaMalloc
void release_cached();
// While on, every block handed out is filled with 0xFF bytes (NaN in F32 and BF16), so a kernel
// that leaves part of its output unwritten shows NaN. Off by default; the check registry turns
// it on through hla::set_poison_allocations(Device::CUDA, on) (tensor/tensor.h).
void set_poison_allocations(bool on);

// CUDA graph memory (cuda/graph.h). A captured graph writes the same addresses at every replay,
// so the blocks it touches must not go back to anyone else while it lives. Between
// begin_graph_memory and end_graph_capture, this thread's allocations and frees (the capture's)
// go through the graph's own pool: a block freed during the capture (whoever allocated it) goes
// to that pool's free lists and may serve a later allocation of the same capture (safe: the
// captured work is one stream-ordered chain, as an eager step on one stream), and every block
// handed out during the capture belongs to the graph. A block the graph owns that the host frees
// later (a tensor that outlived the capture) goes to the graph's pool too. All of them stay
// counted as allocated and return to the free lists at release_graph_memory, once the graph is
// gone; blocks still alive then simply stop belonging to it.
// Allocations during a capture may still reach cudaMalloc (relaxed capture mode allows it: the
// memory exists before the first replay and the graph keeps its address).
int begin_graph_memory();              // returns the graph's pool id
void end_graph_capture(int memory);    // the capture is over; the pool keeps its blocks
void release_graph_memory(int memory);  // the graph is destroyed
// Whether hla's stream (this thread's per-thread default stream) is being captured.
bool capturing();
// Fails, naming `what` and the way out, when called during a capture: for the calls that cannot be
// captured (host reads, blocking copies, synchronize, per-step uploads).
void check_not_capturing(const char* what, size_t bytes);
// During a capture: a host-to-device copy of bytes that are the same at every replay (a table of
// device pointers into the graph's own blocks). The source is copied into a pinned buffer the
// graph's pool keeps until release_graph_memory; the copy node reads it at each replay.
void copy_h2d_captured(void* dst, const void* src, size_t bytes);

// All copies and memsets run in order on hla's stream (the per-thread default stream).
void copy_h2d(void* dst, const void* src, size_t bytes);
void copy_d2h(void* dst, const void* src, size_t bytes);
void copy_d2d(void* dst, const void* src, size_t bytes);
void memset_zero(void* ptr, size_t bytes);
void synchronize();
// How many times hla's host waited for the device: device-to-host copies and synchronize()
// calls since the start. The training step's GPU test reads it around steps that log nothing.
size_t host_syncs();
void count_host_sync();  // for waits outside this file (cuda/staging.cu)

// A device-to-host read the host waits for later (the training loop's window of step records,
// train/trainer.h): start() queues a copy of the `bytes` at a device address into a pinned buffer
// on hla's stream, then an event, and returns at once; wait() blocks on that event (one host wait
// in host_syncs()) and returns the buffer, which keeps the bytes until the next start(). One read
// at a time: start() refuses while the last one was not waited for. Not during a graph capture.
class AsyncRead {
 public:
  explicit AsyncRead(size_t bytes);
  ~AsyncRead();
  AsyncRead(const AsyncRead&) = delete;
  AsyncRead& operator=(const AsyncRead&) = delete;
  void start(const void* device_src);
  const void* wait();

 private:
  void* host_ = nullptr;    // pinned, bytes_ long
  size_t bytes_ = 0;
  void* copied_ = nullptr;  // cudaEvent_t, recorded after the copy
  bool in_flight_ = false;
};

// A timing point on hla's stream: record() queues a CUDA event there (the host does not wait);
// ms_since(earlier) is the GPU time from `earlier` to this point, once the stream has passed this
// one (after a wait for work queued behind it). Not during a graph capture.
class StreamMark {
 public:
  StreamMark();
  ~StreamMark();
  StreamMark(const StreamMark&) = delete;
  StreamMark& operator=(const StreamMark&) = delete;
  void record();
  double ms_since(const StreamMark& earlier) const;

 private:
  void* event_ = nullptr;  // cudaEvent_t
};

int device_count();
std::string device_name(int device = 0);

}  // namespace hla::cuda

#ifdef __CUDACC__
#include <cuda_runtime.h>
#include "tensor/error.h"
#define CUDA_CHECK(expr)                                                              \
  do {                                                                                \
    cudaError_t err_ = (expr);                                                        \
    if (err_ != cudaSuccess) ::hla::fail(__FILE__, ":", __LINE__, ": CUDA error ",    \
                                         cudaGetErrorString(err_), " in " #expr);     \
  } while (0)
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace hla::cuda {
// A second stream for work that may run beside hla's stream (two independent kernels that each
// leave part of the GPU idle). fork_side_stream() returns it, waiting for everything issued on
// hla's stream so far; join_side_stream() makes hla's stream wait for everything issued on it.
// Inside a graph capture the pair is a fork and a join of the captured graph. Between the two,
// the side work must not allocate (the allocator orders its blocks by hla's stream).
cudaStream_t fork_side_stream();
void join_side_stream();
}  // namespace hla::cuda
#endif
