// Host-to-device copies that do not make the host wait, for the training step's batches. A
// plain cudaMemcpy from pageable memory first waits for the stream to drain, so every batch
// upload would stall the host until the previous step's kernels finished. Here the source is
// copied into a pinned staging buffer and the copy queued with cudaMemcpyAsync on hla's stream.
// The buffers form a ring of kStagingSlots; reusing one waits for its previous copy, which has
// long finished unless the host is that many copies ahead (then the wait is counted in
// host_syncs(), cuda/runtime.h). A slot grows when a larger copy comes (cudaFreeHost then
// synchronizes: warm-up only, batches keep their size). Not during a CUDA graph capture (it fails
// there, cuda/graph.h): upload before the replay, into the buffers the graph reads.
#pragma once
#include <cstddef>

namespace hla::cuda {
// A training step queues 3 copies (one process: batches, step inputs, the optimizer's values) or
// 2 grad_accum + 1 (data parallel): 16 slots keep several steps in flight.
constexpr int kStagingSlots = 16;
void copy_h2d_async(void* dst, const void* src, size_t bytes);
}  // namespace hla::cuda
