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

// CUDA graph capture (cuda/graph.h): between begin_hold and end_hold every freed block is held
// aside (still counted as allocated) instead of returning to the free lists, since a captured
// graph writes it again at each replay; end_hold returns them (rounded sizes) and
// release_held puts them back in the free lists once the graph is gone.
void begin_hold();
std::vector<std::pair<void*, size_t>> end_hold();
void release_held(const std::vector<std::pair<void*, size_t>>& blocks);

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
#endif
