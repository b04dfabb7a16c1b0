// A CUDA graph of the work hla queues on its stream. Every kernel, copy and cuBLAS call of hla
// runs on the per-thread default stream (CMakeLists.txt builds cuda/ with --default-stream
// per-thread; cuBLAS is bound to it in cuda/math.cu), so capturing that stream captures a whole
// forward pass. The graph keeps its memory: while it is captured, the blocks the captured work
// frees go aside (cuda/runtime.h: begin_hold) instead of back to the allocator, because every
// replay writes them again; they return to the allocator when the graph is destroyed.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

namespace hla::cuda {

class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Starts capturing the stream (relaxed mode: allocations may still reach cudaMalloc).
  void begin_capture();
  // Ends the capture and instantiates the graph; nothing has run yet.
  void end_capture();
  // Queues one run of the captured work on the stream.
  void replay();

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  bool capturing_ = false;
  std::vector<std::pair<void*, size_t>> held_;  // the blocks the captured work uses
};

}  // namespace hla::cuda
