// CUDA graph capture and replay of hla's stream (see graph.h).
#include "cuda/graph.h"
#include "cuda/runtime.h"

namespace hla::cuda {

void Graph::begin_capture() {
  HLA_CHECK(!capturing_ && !exec_, "cuda graph: begin_capture on a graph already captured");
  begin_hold();
  CUDA_CHECK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeRelaxed));
  capturing_ = true;
}

void Graph::end_capture() {
  HLA_CHECK(capturing_, "cuda graph: end_capture without begin_capture");
  cudaGraph_t graph = nullptr;
  capturing_ = false;
  cudaError_t err = cudaStreamEndCapture(cudaStreamPerThread, &graph);
  held_ = end_hold();
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

// Destructors do not throw: an error here (a failed capture being abandoned) is dropped.
Graph::~Graph() {
  if (capturing_) {
    cudaGraph_t abandoned = nullptr;
    (void)cudaStreamEndCapture(cudaStreamPerThread, &abandoned);
    if (abandoned) (void)cudaGraphDestroy(abandoned);
    (void)cudaGetLastError();
    held_ = end_hold();
  }
  if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  release_held(held_);  // stream order keeps a replay still running ahead of the blocks' next use
}

}  // namespace hla::cuda
