// CUDA graph capture and replay of hla's stream (see graph.h).
#include "cuda/graph.h"
#include "cuda/runtime.h"

namespace hla::cuda {

void Graph::begin_capture() {
  HLA_CHECK(!capturing_ && !exec_, "cuda graph: begin_capture on a graph already captured");
  HLA_CHECK(!capturing(), "cuda graph: begin_capture while hla's stream is already being captured");
  if (memory_ == 0) memory_ = begin_graph_memory();
  const cudaError_t err = cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeRelaxed);
  if (err != cudaSuccess) {
    release_graph_memory(memory_);
    memory_ = 0;
    CUDA_CHECK(err);
  }
  capturing_ = true;
}

void Graph::end_capture() {
  HLA_CHECK(capturing_, "cuda graph: end_capture without begin_capture");
  cudaGraph_t graph = nullptr;
  capturing_ = false;
  cudaError_t err = cudaStreamEndCapture(cudaStreamPerThread, &graph);
  end_graph_capture(memory_);
  CUDA_CHECK(err);
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  exec_ = exec;
}

void Graph::replay() {
  HLA_CHECK(exec_, "cuda graph: replay before end_capture");
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), cudaStreamPerThread));
}

// Errors here are dropped: it runs while an exception from the captured region unwinds. The
// memory it captured goes back to the allocator: nothing of the abandoned graph ever runs.
void Graph::abandon_capture() {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t abandoned = nullptr;
  (void)cudaStreamEndCapture(cudaStreamPerThread, &abandoned);
  if (abandoned) (void)cudaGraphDestroy(abandoned);
  (void)cudaGetLastError();
  release_graph_memory(memory_);
  memory_ = 0;
}

// Destructors do not throw: an error here (a failed capture being abandoned) is dropped.
Graph::~Graph() {
  abandon_capture();
  if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  if (memory_) release_graph_memory(memory_);  // stream order keeps a replay still running ahead of the blocks' next use
}

}  // namespace hla::cuda
