// Decode-step attention against a KV ring cache (nn/ops/attention_decode.h) on the GPU.
//
// A write kernel puts this token's k, v into slot positions[b] % capacity, then the attend
// kernel runs a grid of (b, h) query rows x `splits` blocks. Split-K: block s of a row takes the
// s-th of `splits` contiguous, equal parts of the visible positions [lo, p], so a small batch
// (B * H blocks would leave most SMs idle) still fills the GPU. In a block, kWarps warps split
// the part's positions round-robin; each warp keeps an online softmax (running max m, sum l,
// and the weighted value sum, Dv / 32 elements per lane) over its positions, one key per
// iteration with the q . k dot product spread over the lanes. Pass 2 merges the warps' partial
// softmaxes through shared memory, rescaling each by exp(m_w - M). With one split the block
// writes o; with several it writes its (M, L, unnormalised sum) and the merge kernel combines
// the splits the same way: M* = max_s M_s, o = sum_s sum_s e^(M_s - M*) / sum_s L_s e^(M_s - M*).
// Nothing is sized by the context, so a 128k cache needs no more shared memory than a short one.
#include "cuda/attention_decode.h"
#include "cuda/common.cuh"

namespace hla::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxWidth = 256;            // D, Dv <= 256
constexpr int kPerLane = kMaxWidth / 32;  // register slots per lane

// Every (b, m, e) element of this token's k and v into its cache slot.
template <class T>
__global__ void write_kernel(T* k_cache, T* v_cache, const T* k, const T* v, const int32_t* positions,
                             AttentionDecodeDims d) {
  const int64_t width = d.D > d.Dv ? d.D : d.Dv;
  HLA_GRID_STRIDE(idx, d.B * d.Hkv * width) {
    const int64_t e = idx % width, bm = idx / width, b = bm / d.Hkv, m = bm % d.Hkv;
    const int64_t slot = positions[b] % d.capacity;
    if (e < d.D) k_cache[((b * d.capacity + slot) * d.Hkv + m) * d.D + e] = k[bm * d.D + e];
    if (e < d.Dv) v_cache[((b * d.capacity + slot) * d.Hkv + m) * d.Dv + e] = v[bm * d.Dv + e];
  }
}

// Positions per split below which more splits do not pay for their merge.
constexpr int64_t kMinSplitPositions = 256;

// grid (B * H, splits). splits == 1: o (B, H, Dv) written. Else split_stats (B * H, splits, 2)
// gets each block's (M, L) and split_sums (B * H, splits, Dv) its unnormalised value sum.
template <class T>
__global__ void __launch_bounds__(kWarps * 32)
attend_kernel(T* o, float* split_stats, float* split_sums, const T* k_cache, const T* v_cache, const T* q,
              const int32_t* positions, AttentionDecodeDims d) {
  __shared__ float part_m[kWarps], part_l[kWarps];
  __shared__ float part_acc[kWarps][kMaxWidth];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.x / d.H, h = blockIdx.x % d.H, m = h / (d.H / d.Hkv);
  const int64_t p = positions[b];
  int64_t lo = p - d.capacity + 1 > 0 ? p - d.capacity + 1 : 0;
  if (d.window > 0 && p - d.window + 1 > lo) lo = p - d.window + 1;
  // this block's part of [lo, p]: positions first .. last
  const int64_t splits = gridDim.y, per_split = (p - lo + splits) / splits;
  const int64_t first = lo + blockIdx.y * per_split;
  const int64_t last = first + per_split - 1 < p ? first + per_split - 1 : p;
  const float scale = static_cast<float>(d.scale);

  // pass 1: each warp's online softmax over positions lo + warp, lo + warp + kWarps, ...
  float q_reg[kPerLane], acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; i++) {
    const int e = lane + 32 * i;
    q_reg[i] = e < d.D ? to_float(q[(b * d.H + h) * d.D + e]) : 0.0f;
    acc[i] = 0.0f;
  }
  float run_max = -INFINITY, run_sum = 0.0f;
  for (int64_t tau = first + warp; tau <= last; tau += kWarps) {
    const int64_t slot = tau % d.capacity;
    const T* key = k_cache + ((b * d.capacity + slot) * d.Hkv + m) * d.D;
    const T* value = v_cache + ((b * d.capacity + slot) * d.Hkv + m) * d.Dv;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; i++) {
      const int e = lane + 32 * i;
      if (e < d.D) s += q_reg[i] * to_float(key[e]);
    }
    s = warp_sum(s) * scale;                    // s = scale * q . K[tau]
    const float new_max = fmaxf(run_max, s);
    const float rescale = expf(run_max - new_max), w = expf(s - new_max);
    run_sum = run_sum * rescale + w;
#pragma unroll
    for (int i = 0; i < kPerLane; i++) {
      const int e = lane + 32 * i;
      if (e < d.Dv) acc[i] = acc[i] * rescale + w * to_float(value[e]);
    }
    run_max = new_max;
  }
  if (lane == 0) {
    part_m[warp] = run_max;
    part_l[warp] = run_sum;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; i++) {
    const int e = lane + 32 * i;
    if (e < d.Dv) part_acc[warp][e] = acc[i];
  }
  __syncthreads();

  // pass 2: merge the warps: M = max_w m_w, L = sum_w l_w e^(m_w - M), o = sum_w acc_w e^(m_w - M) / L
  float M = -INFINITY;
  for (int w = 0; w < kWarps; w++) M = fmaxf(M, part_m[w]);
  float L = 0.0f;
  for (int w = 0; w < kWarps; w++) L += part_m[w] == -INFINITY ? 0.0f : part_l[w] * expf(part_m[w] - M);
  const int64_t split = blockIdx.x * splits + blockIdx.y;  // (b * H + h, s)
  if (splits > 1 && threadIdx.x == 0) {
    split_stats[2 * split] = M;  // -inf: an empty part
    split_stats[2 * split + 1] = L;
  }
  for (int e = threadIdx.x; e < d.Dv; e += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; w++)
      if (part_m[w] != -INFINITY) sum += part_acc[w][e] * expf(part_m[w] - M);
    if (splits == 1) o[(b * d.H + h) * d.Dv + e] = from_float<T>(sum / L);
    else split_sums[split * d.Dv + e] = sum;
  }
}

// One block per (b, h): the splits' partial softmaxes merged into o (B, H, Dv).
template <class T>
__global__ void merge_kernel(T* o, const float* split_stats, const float* split_sums, int64_t splits,
                             AttentionDecodeDims d) {
  const float* stats = split_stats + 2 * blockIdx.x * splits;  // stats: (splits, 2)
  const float* sums = split_sums + blockIdx.x * splits * d.Dv;  // sums: (splits, Dv)
  float M = -INFINITY;
  for (int64_t s = 0; s < splits; s++) M = fmaxf(M, stats[2 * s]);
  float L = 0.0f;
  for (int64_t s = 0; s < splits; s++)
    L += stats[2 * s] == -INFINITY ? 0.0f : stats[2 * s + 1] * expf(stats[2 * s] - M);
  for (int e = threadIdx.x; e < d.Dv; e += blockDim.x) {
    float sum = 0.0f;
    for (int64_t s = 0; s < splits; s++)
      if (stats[2 * s] != -INFINITY) sum += sums[s * d.Dv + e] * expf(stats[2 * s] - M);
    o[blockIdx.x * d.Dv + e] = from_float<T>(sum / L);
  }
}

// Splits per (b, h) row: enough blocks for two per SM, but at least kMinSplitPositions cache
// slots per split (the positions a row sees are on the device; the capacity bounds them).
int64_t split_count(const AttentionDecodeDims& d) {
  static const int sms = [] {
    int device = 0, count = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  const int64_t rows = d.B * d.H, wanted = (2 * sms + rows - 1) / rows;
  const int64_t most = (d.capacity + kMinSplitPositions - 1) / kMinSplitPositions;
  return std::max<int64_t>(1, std::min(wanted, most));
}

}  // namespace

void attention_decode_forward(void* o, void* k_cache, void* v_cache, const void* q, const void* k, const void* v,
                              const int32_t* positions, const AttentionDecodeDims& d, DType dtype) {
  HLA_CHECK(d.D <= kMaxWidth && d.Dv <= kMaxWidth, "attention_decode: head widths D ", d.D, ", Dv ", d.Dv,
            " above the kernel's ", kMaxWidth);
  if (d.B == 0) return;
  dispatch_storage(dtype, "attention_decode", [&](auto tag) {
    using S = decltype(tag);
    const int64_t width = d.D > d.Dv ? d.D : d.Dv;
    write_kernel<S><<<grid_1d(d.B * d.Hkv * width), 256>>>(static_cast<S*>(k_cache), static_cast<S*>(v_cache),
                                                           static_cast<const S*>(k), static_cast<const S*>(v),
                                                           positions, d);
    CUDA_CHECK_LAUNCH();
    const int64_t splits = split_count(d);
    FloatScratch stats(splits > 1 ? d.B * d.H * splits * 2 : 0), sums(splits > 1 ? d.B * d.H * splits * d.Dv : 0);
    attend_kernel<S><<<dim3(static_cast<unsigned>(d.B * d.H), static_cast<unsigned>(splits)), kWarps * 32>>>(
        static_cast<S*>(o), stats.get(), sums.get(), static_cast<const S*>(k_cache), static_cast<const S*>(v_cache),
        static_cast<const S*>(q), positions, d);
    CUDA_CHECK_LAUNCH();
    if (splits > 1) {
      merge_kernel<S><<<static_cast<unsigned>(d.B * d.H), 128>>>(static_cast<S*>(o), stats.get(), sums.get(), splits,
                                                                  d);
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace hla::cuda
