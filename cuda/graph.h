// A CUDA graph of the work hla queues on its stream. Every kernel, copy and cuBLAS call of hla
// runs on the per-thread default stream (CMakeLists.txt builds cuda/ with --default-stream
// per-thread; cuBLAS is bound to it in cuda/math.cu), so capturing that stream captures a whole
// forward pass (the decoder's step, nn/decode.cpp) or a whole training step (train/trainer.cpp).
// The graph keeps its memory: the blocks the captured work allocates or frees belong to the
// graph's pool (cuda/runtime.h: CUDA graph memory) until the graph is destroyed, because every
// replay writes them again. What cannot be captured (a host read, a blocking copy, a synchronize,
// a per-step upload through the staging ring) fails during the capture, naming the call
// (cuda/runtime.h: check_not_capturing), instead of replaying a wrong step.
#pragma once

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
  // Ends a capture that failed (an exception inside the captured region) and drops what it
  // captured; the graph can then be destroyed or captured again.
  void abandon_capture();
  // Queues one run of the captured work on the stream.
  void replay();
  bool captured() const { return exec_ != nullptr; }

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  bool capturing_ = false;
  int memory_ = 0;  // the graph's pool in the allocator (0: none)
};

}  // namespace hla::cuda
