// The training step's multi-tensor reductions on the GPU (cuda/grad_norm.h).
//
// multi_sq_norm is one launch over every tensor of a table: the tensors are cut into chunks of
// kChunk elements, one block per chunk sums its squares in fp32 and writes one partial; the last
// block to finish (a device counter) adds each tensor's partials in chunk order, and the tensors'
// sums in table order, in fp64. No atomics on the values, so the same inputs give the same bits.
// multi_scale runs over the same chunks. The table lives on the device: it is uploaded only when
// it differs from the last one (after warm-up the gradients keep their blocks, so never), and
// then through the pinned staging ring (cuda/staging.h), so the host never waits for it. During a
// CUDA graph capture the table goes into a buffer of the graph's own (cuda/runtime.h:
// copy_h2d_captured), which every replay fills again before its kernels read it.
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/grad_norm.h"
#include "cuda/staging.h"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 32 * kThreads;  // elements per block

struct DeviceSpan {
  void* data;
  int64_t numel;
  int64_t first_chunk;  // chunks before this tensor's first
  int64_t bf16;         // 64 bits: no padding, so tables compare with memcmp
};

// The table on the device, re-uploaded when the host table changes; one per process (the step
// ops run on one stream, one at a time).
struct TableCache {
  std::mutex mu;
  std::vector<DeviceSpan> host;
  DeviceSpan* device = nullptr;
  size_t capacity = 0;  // entries
  unsigned* blocks_done = nullptr;  // multi_sq_norm's last-block counter, back to 0 after each launch
};
TableCache& cache() {
  static TableCache* c = new TableCache();  // never destroyed, like the allocator's pool
  return *c;
}

struct UploadedTable {
  const DeviceSpan* spans;
  int n;
  int64_t chunks;
  std::unique_ptr<FloatScratch> captured;  // during a graph capture: the graph's own copy of the table
};

UploadedTable upload(const TensorTable& xs) {
  std::vector<DeviceSpan> host;
  int64_t chunks = 0;
  for (const TensorSpan& x : xs) {
    HLA_CHECK(x.numel == 0 || x.dtype == DType::F32 || x.dtype == DType::BF16,
              "multi-tensor step ops: CUDA kernels take F32 or BF16, got ", dtype_name(x.dtype));
    host.push_back({x.data, x.numel, chunks, x.dtype == DType::BF16});
    chunks += (x.numel + kChunk - 1) / kChunk;
  }
  if (capturing()) {  // the graph keeps the table it was captured with; the cache stays the eager steps'
    UploadedTable t{nullptr, static_cast<int>(xs.size()), chunks,
                    std::make_unique<FloatScratch>(host.size() * sizeof(DeviceSpan) / sizeof(float))};
    if (!host.empty()) copy_h2d_captured(t.captured->get(), host.data(), host.size() * sizeof(DeviceSpan));
    t.spans = reinterpret_cast<const DeviceSpan*>(t.captured->get());
    return t;
  }
  TableCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (!c.blocks_done) {
    c.blocks_done = static_cast<unsigned*>(device_alloc(sizeof(unsigned)));
    memset_zero(c.blocks_done, sizeof(unsigned));
  }
  const bool same = host.size() == c.host.size() &&
                    std::memcmp(host.data(), c.host.data(), host.size() * sizeof(DeviceSpan)) == 0;
  if (!same) {
    if (host.size() > c.capacity) {
      if (c.device) device_free(c.device, c.capacity * sizeof(DeviceSpan));
      c.capacity = std::max<size_t>(host.size(), 1);
      c.device = static_cast<DeviceSpan*>(device_alloc(c.capacity * sizeof(DeviceSpan)));
    }
    // queued on the stream, after the kernels that still read the old table
    if (!host.empty()) copy_h2d_async(c.device, host.data(), host.size() * sizeof(DeviceSpan));
    c.host = std::move(host);
  }
  return {c.device, static_cast<int>(xs.size()), chunks, nullptr};
}

// The table entry holding chunk `chunk`: the last one whose first_chunk <= chunk (an empty tensor
// shares its first_chunk with the next non-empty one, which comes later, so it is never chosen).
__device__ int span_of(const DeviceSpan* spans, int n, int64_t chunk) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (spans[mid].first_chunk <= chunk) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

__device__ float load(const DeviceSpan& s, int64_t i) {
  return s.bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(s.data)[i]) : static_cast<const float*>(s.data)[i];
}

// partials: (chunks) fp32; sums: (n + 1) fp64
__global__ void multi_sq_norm_kernel(double* sums, float* partials, unsigned* blocks_done, const DeviceSpan* spans,
                                     int n, int64_t chunks) {
  __shared__ float scratch[32];
  __shared__ bool last;
  const int64_t chunk = blockIdx.x;
  if (chunk < chunks) {  // pass 1: this chunk's fp32 sum of squares
    const DeviceSpan s = spans[span_of(spans, n, chunk)];
    const int64_t begin = (chunk - s.first_chunk) * kChunk, end = std::min<int64_t>(begin + kChunk, s.numel);
    float acc = 0;
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
      const float v = load(s, i);
      acc += v * v;
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) partials[chunk] = acc;
  }
  __threadfence();  // the partial is visible before the counter says so
  if (threadIdx.x == 0) last = atomicAdd(blocks_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // pass 2 (the last block): per tensor, its chunks in order; then the tensors in order
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int64_t first = spans[i].first_chunk, count = (spans[i].numel + kChunk - 1) / kChunk;
    double s = 0;
    for (int64_t c = first; c < first + count; c++) s += static_cast<double>(__ldcg(partials + c));  // past L1
    sums[i] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int i = 0; i < n; i++) total += sums[i];
    sums[n] = total;
    *blocks_done = 0;  // ready for the next launch
  }
}

__global__ void multi_scale_kernel(const DeviceSpan* spans, int n, const double* factor) {
  const double f = *factor;
  if (f == 1.0) return;  // not clipped: nothing to write
  const DeviceSpan s = spans[span_of(spans, n, blockIdx.x)];
  const int64_t begin = (blockIdx.x - s.first_chunk) * kChunk, end = std::min<int64_t>(begin + kChunk, s.numel);
  const float ff = static_cast<float>(f);
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float v = f == 0.0 ? 0.0f : load(s, i) * ff;  // 0: drop the values, NaN and Inf too
    if (s.bf16) static_cast<__nv_bfloat16*>(s.data)[i] = __float2bfloat16_rn(v);
    else static_cast<float*>(s.data)[i] = v;
  }
}

__global__ void accumulate_loss_kernel(double* record, const void* loss, int bf16, const double* weight) {
  const double l = bf16 ? __bfloat162float(*static_cast<const __nv_bfloat16*>(loss)) : *static_cast<const float*>(loss);
  record[0] += *weight * l;
}

__global__ void finish_step_kernel(double* record, double* status, const double* sums, int64_t n, double max_norm,
                                   const double* step) {
  const double norm = sqrt(sums[n]);
  record[1] = norm;
  if (status[0] == 0 && !(isfinite(record[0]) && isfinite(norm))) {
    status[0] = *step;
    status[1] = -1;
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(sums[i])) { status[1] = static_cast<double>(i); break; }
  }
  status[2] = status[0] != 0 ? 0.0 : (max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0);
}

}  // namespace

void multi_sq_norm(double* sums, const TensorTable& xs) {
  const UploadedTable t = upload(xs);
  FloatScratch partials(t.chunks);
  const int64_t blocks = std::max<int64_t>(t.chunks, 1);
  HLA_CHECK(blocks < (int64_t(1) << 31), "multi_sq_norm: ", t.chunks, " chunks do not fit one grid");
  multi_sq_norm_kernel<<<static_cast<unsigned>(blocks), kThreads>>>(sums, partials.get(), cache().blocks_done,
                                                                     t.spans, t.n, t.chunks);
  CUDA_CHECK_LAUNCH();
}

void multi_scale(const TensorTable& xs, const double* factor) {
  const UploadedTable t = upload(xs);
  if (t.chunks == 0) return;
  multi_scale_kernel<<<static_cast<unsigned>(t.chunks), kThreads>>>(t.spans, t.n, factor);
  CUDA_CHECK_LAUNCH();
}

void accumulate_loss(double* record, const void* loss, DType dtype, const double* weight) {
  dispatch_storage(dtype, "accumulate_loss", [](auto) {});
  accumulate_loss_kernel<<<1, 1>>>(record, loss, dtype == DType::BF16, weight);
  CUDA_CHECK_LAUNCH();
}

void finish_step(double* record, double* status, const double* sums, int64_t n, double max_norm, const double* step) {
  finish_step_kernel<<<1, 1>>>(record, status, sums, n, max_norm, step);
  CUDA_CHECK_LAUNCH();
}

}  // namespace hla::cuda
