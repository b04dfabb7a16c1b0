// Hopper warpgroup MMA (sm_90a PTX): wgmma.mma_async m64nNk16, fp32 += bf16 x bf16, N = 64 or
// 128, A from shared memory (a K-major descriptor) or from registers, B from shared memory
// (K-major or N-major: cuda/wgmma_desc.cuh); wgmma.fence, commit_group, wait_group, and the
// proxy fence that makes ordinary shared-memory writes (st.shared, cp.async) visible to it;
// stmatrix; bulk copies and adds from shared to global memory, and turns that order such adds
// between blocks; the named barriers and register moves of warp-specialised kernels. The host
// emulator (tests/emu/include/cuda/wgmma.cuh) runs the same calls.
//
// A warpgroup is 4 consecutive warps (threads 128 i .. 128 i + 127); all 128 threads issue each
// call together, with the same descriptors. The product is asynchronous: it reads shared memory
// and writes the accumulators until a wait_group retires its group, so between an mma and that
// wait the kernel must not touch the accumulators (nor A's registers, nor the tiles). The
// accumulator arrays are named to wgmma_fence and wgmma_wait, which pin them (an empty asm that
// reads and writes each register) so that the compiler moves no access across the async region.
//
// Register fragments (PTX ISA 9.7.15.5.1.1, "Register Fragments", m64nNk16 with .bf16),
// w = warp in the warpgroup, g = lane / 4, t = lane % 4: warp w owns rows 16 w .. 16 w + 15,
// laid out as mma.m16n8k16's (cuda/mma.cuh) in each 8-column block:
//   A (64 x 16), 4 regs of 2 bf16: a0 = A[16w+g][2t..2t+1],   a1 = A[16w+g+8][2t..2t+1],
//                                  a2 = A[16w+g][2t+8..2t+9], a3 = A[16w+g+8][2t+8..2t+9]
//   D (64 x N, fp32), N / 2 floats: d[4j + i] = D[16w + g + 8 (i / 2)][8j + 2t + i % 2]
// So an ldmatrix_x4 of a swizzled tile gives A's registers, and D packed to bf16 gives the A
// registers of the next product (P of attention), as with mma.sync.
// Only sm_90a has these instructions: compiled for another architecture a call traps, and the
// host never launches such a kernel (CMakeLists.txt defines HLA_WGMMA when the build has 90a).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/wgmma_desc.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HLA_SM90A(...) __VA_ARGS__
#elif defined(__CUDA_ARCH__)
#define HLA_SM90A(...) __trap()
#else
#define HLA_SM90A(...)
#endif
#define HLA_WGMMA_D32_REGS \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define HLA_WGMMA_D64_REGS \
  HLA_WGMMA_D32_REGS ", " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define HLA_WGMMA_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define HLA_WGMMA_D8(i) HLA_WGMMA_D4(i), HLA_WGMMA_D4(i + 4)
#define HLA_WGMMA_D32(i) HLA_WGMMA_D8(i), HLA_WGMMA_D8(i + 8), HLA_WGMMA_D8(i + 16), HLA_WGMMA_D8(i + 24)

namespace hla::cuda {

// Keeps the compiler from moving accesses to d across the asm statements around it.
template <int LEN>
__device__ __forceinline__ void pin_registers(float (&d)[LEN]) {
  for (int i = 0; i < LEN; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// Before the first mma of a batch: orders earlier register writes (accumulators, A) before it.
template <class... Acc>
__device__ __forceinline__ void wgmma_fence(Acc&... acc) {
  (pin_registers(acc), ...);
  HLA_SM90A(asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"));
}
// Closes the batch of mma issued since the last commit into one group.
__device__ __forceinline__ void wgmma_commit() {
  HLA_SM90A(asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"));
}
// Waits until at most PENDING groups are in flight; acc: the accumulators the retired groups
// wrote.
template <int PENDING, class... Acc>
__device__ __forceinline__ void wgmma_wait(Acc&... acc) {
  HLA_SM90A(asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory"));
  (pin_registers(acc), ...);
}
// After this thread's shared-memory writes (its cp.async waited for), before the barrier that
// precedes the mma reading them: wgmma reads through the async proxy.
__device__ __forceinline__ void fence_proxy_async() {
  HLA_SM90A(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"));
}

// Four 8 x 8 b16 matrices to shared memory, transposed (stmatrix .trans, the inverse of
// cuda/mma.cuh's ldmatrix_x4_trans): register i holds fragment matrix i's (row lane / 4, columns
// 2 (lane % 4), +1), as an accumulator packed to bf16 pairs does; lanes 8 i .. 8 i + 7 give the
// addresses of stored matrix i's rows, row j being fragment column j (8 contiguous b16).
__device__ __forceinline__ void stmatrix_x4_trans(void* smem, const uint32_t (&r)[4]) {
  HLA_SM90A(asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                             static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
                         "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                         : "memory"));
}

// Bulk copies by the TMA unit (cp.async.bulk, sm_90), issued by one thread: `bytes` (a multiple
// of 16; both addresses 16-byte aligned) from shared memory to global memory, stored or added
// (fp32, the add performed at L2). Issued copies form a group at bulk_commit; bulk_wait_read<N>
// returns once at most N groups still read their source (it may then be overwritten),
// bulk_wait<N> once at most N groups are incomplete (their writes done). The shared-memory source
// must be made visible to the async proxy first (fence_proxy_async, then a barrier).
__device__ __forceinline__ void bulk_store(float* g, const float* s, uint32_t bytes) {
  HLA_SM90A(asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(g),
                         "r"(static_cast<uint32_t>(__cvta_generic_to_shared(s))), "r"(bytes)
                         : "memory"));
}
__device__ __forceinline__ void bulk_add(float* g, const float* s, uint32_t bytes) {
  HLA_SM90A(asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(g),
                         "r"(static_cast<uint32_t>(__cvta_generic_to_shared(s))), "r"(bytes)
                         : "memory"));
}
__device__ __forceinline__ void bulk_commit() { HLA_SM90A(asm volatile("cp.async.bulk.commit_group;\n" ::: "memory")); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  HLA_SM90A(asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory"));
}
template <int N>
__device__ __forceinline__ void bulk_wait() {
  HLA_SM90A(asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory"));
}

// Turns between blocks: blocks that add to one sum in global memory take turns in a fixed order
// (a deterministic sum), counted by a flag. wait_turn spins until *turn == order, then its
// acquire (and the proxy fence) orders the bulk adds that follow after those of the turns
// before; pass_turn, after bulk_wait<0> (the adds done), hands the turn on. One thread each.
// The block a turn waits for must be resident or done (launched earlier: lower block index).
__device__ __forceinline__ void wait_turn(const int* turn, int order) {
  int seen;
  do asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(seen) : "l"(turn) : "memory");
  while (seen != order);
  HLA_SM90A(asm volatile("fence.proxy.async.global;\n" ::: "memory"));
}
__device__ __forceinline__ void pass_turn(int* turn, int next) {
  HLA_SM90A(asm volatile("fence.proxy.async.global;\n" ::: "memory"));
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(turn), "r"(next) : "memory");
}

// d (+)= A B^T over one k16 slice: A (64 x 16) at desc_a, B (N x 16) at desc_b, N-major when
// B_N_MAJOR (cuda/wgmma_desc.cuh); accumulate = false ignores d's old values.
template <int N, bool B_N_MAJOR = false>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  static_assert(N == 64 || N == 128, "wgmma_m64k16: N is 64 or 128");
  if constexpr (N == 64)
    HLA_SM90A(asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{" HLA_WGMMA_D32_REGS "}, %32, %33, p, 1, 1, 0, %35;\n}\n"
        : HLA_WGMMA_D32(0)
        : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(int(B_N_MAJOR))));
  else
    HLA_SM90A(asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{" HLA_WGMMA_D64_REGS "}, %64, %65, p, 1, 1, 0, %67;\n}\n"
        : HLA_WGMMA_D32(0), HLA_WGMMA_D32(32)
        : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(int(B_N_MAJOR))));
}
// The same with A from registers (the fragment above).
template <int N, bool B_N_MAJOR = false>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                             bool accumulate) {
  static_assert(N == 64 || N == 128, "wgmma_m64k16: N is 64 or 128");
  if constexpr (N == 64)
    HLA_SM90A(asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{" HLA_WGMMA_D32_REGS "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : HLA_WGMMA_D32(0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)), "n"(int(B_N_MAJOR))));
  else
    HLA_SM90A(asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{" HLA_WGMMA_D64_REGS "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : HLA_WGMMA_D32(0), HLA_WGMMA_D32(32)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)), "n"(int(B_N_MAJOR))));
}

// Warp specialisation (a producer warpgroup loading tiles for consumer warpgroups that compute):
// named barriers 1..15 (0 is __syncthreads'), each over `threads` threads (a multiple of 32) of
// the block: sync waits for all of them, arrive counts this thread in and goes on (a producer's
// "tile full", a consumer's "tile free"). Both order this thread's earlier memory accesses before
// the barrier completes. setmaxnreg moves registers between the warpgroups of a block: a
// warpgroup gives its registers down to REGS a thread (dealloc) or waits for them up to REGS
// (alloc); REGS a multiple of 8 in [24, 256], all 128 threads of the warpgroup together.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int REGS>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
  HLA_SM90A(asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS)));
}
template <int REGS>
__device__ __forceinline__ void warpgroup_reg_alloc() {
  HLA_SM90A(asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS)));
}

}  // namespace hla::cuda

#undef HLA_WGMMA_D32
#undef HLA_WGMMA_D8
#undef HLA_WGMMA_D4
#undef HLA_WGMMA_D64_REGS
#undef HLA_WGMMA_D32_REGS
#undef HLA_SM90A
