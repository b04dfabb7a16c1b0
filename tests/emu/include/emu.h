// Host emulator of the CUDA execution model for running the mma kernels on the CPU (g++).
// Threads of a block are fibers (ucontext for the first entry, _setjmp/_longjmp after), run by a
// round-robin scheduler; __syncthreads and the warp collectives (shuffles, __syncwarp, mma) are
// barriers over the block / the warp (an xor shuffle with a partial mask: over the mask's lanes),
// the warpgroup MMA (wgmma) a barrier over its 4 warps, a named barrier (bar.sync / bar.arrive)
// one over the threads it names.
// Blocks run one after another; shared memory is one buffer filled with 0xff (NaN) before every
// block, whose shared-space addresses (__cvta_generic_to_shared) start at kSharedWindowStart;
// cp.async copies are deferred to the wait that retires their group, wgmma products and bulk
// copies to their wait_group.
#pragma once
#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <utility>
#include <vector>

struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

namespace emu {

constexpr size_t kSmemBytes = 232448;
// The shared-space address of the buffer's first byte: 16-byte but not 1024-byte aligned, so a
// kernel that needs aligned tiles (cuda/wgmma_desc.cuh) must align them itself, as on the GPU.
constexpr uint32_t kSharedWindowStart = 16;
// cp.async copies land at the wait (a read before the wait sees stale data). When set, they also
// land at the issue, and between two __syncthreads the warps run one after another instead of
// side by side (warp w starts once warps 0 .. w - 1 wait at the barrier, or at a wgmma's
// warpgroup barrier): a copy issued before every other warp has read its destination then
// corrupts their reads. Real copies land anywhere in between, real warps run in any order: a
// test runs both ways to bound the two hazards.
inline bool cp_async_lands_at_issue = false;
struct Copy { void* dst; const void* src; bool valid; };
struct Fiber {
  ucontext_t uctx;
  jmp_buf jb;
  bool started = false, done = false, at_group_barrier = false;  // group: the block, or a wgmma's warpgroup
  uint3 tid;
  std::vector<Copy> pending;        // cp.async copies not landed yet, in issue order
  std::deque<size_t> copy_groups;   // the committed groups among them, oldest first: copies in each
  // wgmma products (tests/emu/include/cuda/wgmma.cuh): issued since the last commit_group, and
  // the committed groups in flight, oldest first.
  std::vector<std::function<void()>> wgmma_open;
  std::deque<std::vector<std::function<void()>>> wgmma_groups;
  // bulk copies (cp.async.bulk): issued since the last commit, and the committed groups in flight
  std::vector<std::function<void()>> bulk_open;
  std::deque<std::vector<std::function<void()>>> bulk_groups;
  long bulk_committed = 0, bulk_done = 0;            // groups committed, and performed, so far
  std::vector<std::pair<const int*, long>> turns;  // turns taken (wait_turn): the group of their copies
};
struct Barrier { int expected = 0, arrived = 0; unsigned gen = 0; };

struct Block {
  std::vector<Fiber> fibers;
  std::vector<std::vector<char>> stacks;
  std::vector<Barrier> warp_bars, warpgroup_bars;
  std::map<std::pair<unsigned, unsigned>, Barrier> lane_bars;  // (warp, mask): a partial-mask shuffle's lanes
  Barrier named_bars[16];  // bar.sync / bar.arrive id, 1 .. 15 (tests/emu/include/cuda/wgmma.cuh)
  Barrier block_bar;
  int cur = -1;
  ucontext_t sched_uctx;
  jmp_buf sched_jb;
  long progress = 0;
  std::function<void()> body;
  std::vector<float> shfl;          // per thread
  std::vector<uint32_t> frag;       // per thread: a0..a3, b0, b1
  std::vector<uint64_t> descs;      // per thread: a wgmma's two matrix descriptors
  std::vector<const void*> addr;    // per thread: the row address an ldmatrix reads
};

inline Block& blk() { static Block b; return b; }
alignas(16) inline char smem_buf[kSmemBytes];
inline float4* shared_memory() { return reinterpret_cast<float4*>(smem_buf); }
// The bytes at shared-space address `addr`, `bytes` long (abort outside the buffer).
inline const char* shared_at(uint64_t addr, size_t bytes) {
  if (addr < kSharedWindowStart || addr + bytes > kSharedWindowStart + kSmemBytes) {
    std::fprintf(stderr, "emu: shared address %llu is outside shared memory\n", static_cast<unsigned long long>(addr));
    std::abort();
  }
  return smem_buf + (addr - kSharedWindowStart);
}

inline Fiber& me() { return blk().fibers[blk().cur]; }
inline void yield() {
  Block& b = blk();
  if (!_setjmp(b.fibers[b.cur].jb)) _longjmp(b.sched_jb, 1);
}
inline void arrive_wait(Barrier& bar) {
  const unsigned g = bar.gen;
  blk().progress++;  // an arrival is progress (the deadlock check counts them)
  if (++bar.arrived == bar.expected) {
    bar.arrived = 0, bar.gen++;
  } else {
    while (bar.gen == g) yield();
  }
}
inline void fiber_entry() {
  Block& b = blk();
  b.body();
  b.fibers[b.cur].done = true;
  b.progress++;
  _longjmp(b.sched_jb, 1);
}

}  // namespace emu

inline uint3 blockIdx, blockDim, gridDim;
#define threadIdx (::emu::me().tid)

inline void __syncthreads() {
  emu::me().at_group_barrier = true;
  emu::arrive_wait(emu::blk().block_bar);
  emu::me().at_group_barrier = false;
}
inline void __syncwarp(unsigned = 0xffffffffu) { emu::arrive_wait(emu::blk().warp_bars[threadIdx.x / 32]); }
inline void emu_sync_warpgroup() {
  emu::me().at_group_barrier = true;
  emu::arrive_wait(emu::blk().warpgroup_bars[threadIdx.x / 128]);
  emu::me().at_group_barrier = false;
}
inline size_t __cvta_generic_to_shared(const void* p) {
  const char* c = static_cast<const char*>(p);
  if (c < emu::smem_buf || c >= emu::smem_buf + emu::kSmemBytes) {
    std::fprintf(stderr, "emu: __cvta_generic_to_shared of a pointer outside shared memory\n");
    std::abort();
  }
  return size_t(c - emu::smem_buf) + emu::kSharedWindowStart;
}
// The lanes of `mask` in this thread's warp meet (the whole warp: its barrier); a lane outside
// its mask, or a source lane outside it, aborts.
inline void emu_sync_lanes(unsigned mask, int src_lane) {
  const unsigned lane = threadIdx.x % 32;
  if (!(mask >> lane & 1u) || !(mask >> src_lane & 1u)) {
    std::fprintf(stderr, "emu: a shuffle by or from a lane outside its mask\n");
    std::abort();
  }
  if (mask == 0xffffffffu) {
    __syncwarp();
    return;
  }
  emu::Barrier& bar = emu::blk().lane_bars[{threadIdx.x / 32, mask}];
  bar.expected = __builtin_popcount(mask);
  emu::arrive_wait(bar);
}
inline float emu_shfl(float v, int src_lane, unsigned mask = 0xffffffffu) {
  emu::Block& b = emu::blk();
  const unsigned tid = threadIdx.x, warp = tid / 32;
  b.shfl[tid] = v;
  emu_sync_lanes(mask, src_lane);
  const float r = b.shfl[warp * 32 + src_lane];
  emu_sync_lanes(mask, src_lane);
  return r;
}
inline float __shfl_xor_sync(unsigned mask, float v, int off) { return emu_shfl(v, (threadIdx.x % 32) ^ off, mask); }
inline float __shfl_sync(unsigned mask, float v, int src_lane) {
  if (mask != 0xffffffffu) { std::fprintf(stderr, "emu: partial shuffle mask\n"); std::abort(); }
  return emu_shfl(v, src_lane % 32);
}
inline float __shfl_up_sync(unsigned mask, float v, int off) {
  if (mask != 0xffffffffu) { std::fprintf(stderr, "emu: partial shuffle mask\n"); std::abort(); }
  const int lane = threadIdx.x % 32;
  return emu_shfl(v, lane >= off ? lane - off : lane);
}
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

namespace emu {

// Runs kernel(params...) over the grid, block by block.
template <class Kernel, class... Params>
void launch(Kernel kernel, dim3 grid, int threads, size_t bytes, Params... params) {
  if (bytes > kSmemBytes) { std::fprintf(stderr, "emu: %zu B of shared memory\n", bytes); std::abort(); }
  Block& b = blk();
  constexpr size_t kStack = 256 * 1024;
  b.fibers.assign(threads, Fiber{});
  b.stacks.resize(threads);
  for (auto& s : b.stacks) s.resize(kStack);
  b.shfl.assign(threads, 0.f);
  b.frag.assign(size_t(threads) * 6, 0u);
  b.descs.assign(size_t(threads) * 2, 0u);
  b.addr.assign(threads, nullptr);
  gridDim = {grid.x, grid.y, grid.z};
  blockDim = {unsigned(threads), 1, 1};
  b.body = [=] { kernel(params...); };
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        blockIdx = {x, y, z};
        std::memset(smem_buf, 0xff, kSmemBytes);
        b.warp_bars.assign((threads + 31) / 32, Barrier{});
        for (auto& w : b.warp_bars) w.expected = 32;
        b.lane_bars.clear();
        b.warpgroup_bars.assign((threads + 127) / 128, Barrier{});
        for (size_t g = 0; g < b.warpgroup_bars.size(); g++)
          b.warpgroup_bars[g].expected = std::min(128, threads - 128 * int(g));
        b.block_bar = Barrier{};
        for (Barrier& n : b.named_bars) n = Barrier{};
        b.block_bar.expected = threads;
        for (int i = 0; i < threads; i++) {
          Fiber& f = b.fibers[i];
          f.started = f.done = f.at_group_barrier = false;
          f.tid = {unsigned(i), 0, 0};
          f.pending.clear();
          f.copy_groups.clear();
          f.wgmma_open.clear();
          f.wgmma_groups.clear();
          f.bulk_open.clear();
          f.bulk_groups.clear();
          f.bulk_committed = f.bulk_done = 0;
          f.turns.clear();
          getcontext(&f.uctx);
          f.uctx.uc_stack.ss_sp = b.stacks[i].data();
          f.uctx.uc_stack.ss_size = kStack;
          f.uctx.uc_link = nullptr;
          makecontext(&f.uctx, fiber_entry, 0);
        }
        for (;;) {
          bool all_done = true;
          const long before = b.progress;
          int parked = 0;  // leading threads done or at a __syncthreads or wgmma barrier (warps one after another)
          while (parked < threads && (b.fibers[parked].done || b.fibers[parked].at_group_barrier)) parked++;
          for (int i = 0; i < threads; i++) {
            Fiber& f = b.fibers[i];
            if (f.done) continue;
            if (cp_async_lands_at_issue && i / 32 > parked / 32) {
              all_done = false;
              continue;
            }
            b.cur = i;
            if (!_setjmp(b.sched_jb)) {
              if (!f.started) { f.started = true; swapcontext(&b.sched_uctx, &f.uctx); }
              else _longjmp(f.jb, 1);
            }
            if (!f.done) all_done = false;
          }
          if (all_done) break;
          if (b.progress == before) {
            std::fprintf(stderr, "emu: deadlock in block (%u, %u, %u): a barrier is not reached by all\n", x, y, z);
            std::abort();
          }
        }
        for (const Barrier& n : b.named_bars)
          if (n.arrived != 0) {
            std::fprintf(stderr, "emu: block (%u, %u, %u) ended with a named barrier part-way arrived\n", x, y, z);
            std::abort();
          }
        for (const Fiber& f : b.fibers)
          if (!f.wgmma_open.empty() || !f.wgmma_groups.empty()) {
            std::fprintf(stderr, "emu: block (%u, %u, %u) ended with wgmma products not waited for\n", x, y, z);
            std::abort();
          }
        for (const Fiber& f : b.fibers)
          if (!f.bulk_open.empty() || !f.bulk_groups.empty()) {
            std::fprintf(stderr, "emu: block (%u, %u, %u) ended with bulk copies not waited for\n", x, y, z);
            std::abort();
          }
        b.cur = -1;
      }
}

}  // namespace emu
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
