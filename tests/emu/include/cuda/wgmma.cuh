// Emulated cuda/wgmma.cuh: wgmma.mma_async m64nNk16 (fp32 += bf16 x bf16, N = 64 or 128, A by
// descriptor or from registers, B K-major or N-major), commit_group and wait_group, as the PTX ISA
// documents them (9.7.15.5, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Operation"):
//   - an mma is a barrier over its warpgroup (blockDim a multiple of 128): the 128 threads post
//     their A registers and descriptors, each thread checks that the descriptors agree and keeps
//     the two rows of A its accumulators need (the register fragments of cuda/wgmma.cuh);
//   - the product runs at the wait_group that retires its group: the operands in shared memory
//     are read then, through the descriptor as the hardware decodes it (cuda/wgmma_desc.cuh:
//     start address, leading and stride byte offsets, the 128-byte swizzle as an XOR of address
//     bits 7-9 into bits 4-6), and the accumulators written then (fp32, k in order). So a kernel
//     that reads its accumulators before the wait, or overwrites a tile before it, gets wrong
//     results here, and one that writes A's registers before it aborts;
//   - descriptors this emulator does not model (another swizzle, a base offset, a K-major start
//     whose bits 7-9 are set, an N-major start off a 1024-byte boundary) abort, as does a block
//     that ends with products not waited for.
// fence and the proxy fence have nothing to order here. The named barriers of warp-specialised
// kernels are barriers over their thread counts; setmaxnreg does nothing.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "cuda/wgmma_desc.cuh"

namespace hla::cuda {

template <class... Acc>
inline void wgmma_fence(Acc&...) {}
inline void fence_proxy_async() {}

// stmatrix.m8n8.x4.trans: lanes 8i..8i+7 give the row addresses of stored matrix i (exchanged
// through the warp); lane l's register i holds fragment matrix i's (row l/4, columns 2(l%4), +1),
// stored at (rows 2(l%4), +1, column l/4).
inline void stmatrix_x4_trans(void* smem, const uint32_t (&r)[4]) {
  emu::Block& blk = emu::blk();
  const unsigned tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  blk.addr[tid] = smem;
  __syncwarp();
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; i++)
    for (int half = 0; half < 2; half++) {
      const uint16_t v = static_cast<uint16_t>(r[i] >> (16 * half));
      std::memcpy(static_cast<char*>(const_cast<void*>(blk.addr[warp * 32 + 8 * i + 2 * t + half])) + 2 * g, &v, 2);
    }
  __syncwarp();
}

inline void wgmma_commit() {
  emu::Fiber& f = emu::me();
  f.wgmma_groups.push_back(std::move(f.wgmma_open));
  f.wgmma_open.clear();
}
template <int PENDING, class... Acc>
inline void wgmma_wait(Acc&...) {
  emu::Fiber& f = emu::me();
  while (int(f.wgmma_groups.size()) > PENDING) {
    for (const auto& product : f.wgmma_groups.front()) product();
    f.wgmma_groups.pop_front();
  }
}

[[noreturn]] inline void emu_wgmma_fail(const char* what) {
  std::fprintf(stderr, "emu: wgmma: %s\n", what);
  std::abort();
}

// Bulk copies: deferred to the wait that retires their group (the source read and the
// destination written then), so a kernel that overwrites the source before bulk_wait_read gets
// wrong sums here. Turns: blocks run one after another, so a turn waited for must have been
// passed by a block before; passing one with bulk copies not waited for aborts.
inline void emu_bulk(float* g, const float* s, uint32_t bytes, bool add) {
  if (bytes % 16 != 0 || reinterpret_cast<uintptr_t>(g) % 16 != 0 || reinterpret_cast<uintptr_t>(s) % 16 != 0)
    emu_wgmma_fail("a bulk copy is 16-byte aligned, a multiple of 16 bytes");
  (void)__cvta_generic_to_shared(s);  // aborts outside shared memory
  emu::me().bulk_open.push_back([=] {
    for (uint32_t i = 0; i < bytes / 4; i++) g[i] = add ? g[i] + s[i] : s[i];
  });
}
inline void bulk_store(float* g, const float* s, uint32_t bytes) { emu_bulk(g, s, bytes, false); }
inline void bulk_add(float* g, const float* s, uint32_t bytes) { emu_bulk(g, s, bytes, true); }
inline void bulk_commit() {
  emu::Fiber& f = emu::me();
  f.bulk_groups.push_back(std::move(f.bulk_open));
  f.bulk_open.clear();
  f.bulk_committed++;
}
template <int N>
inline void bulk_wait() {
  emu::Fiber& f = emu::me();
  while (int(f.bulk_groups.size()) > N) {
    for (const auto& copy : f.bulk_groups.front()) copy();
    f.bulk_groups.pop_front();
    f.bulk_done++;
  }
}
template <int N>
inline void bulk_wait_read() { bulk_wait<N>(); }
// A turn's copies: the next group committed after wait_turn; pass_turn wants that group done.
inline void wait_turn(const int* turn, int order) {
  if (*turn != order) emu_wgmma_fail("a block waits for a turn that no block before it passed");
  emu::me().turns.push_back({turn, emu::me().bulk_committed});
}
inline void pass_turn(int* turn, int next) {
  emu::Fiber& f = emu::me();
  for (auto it = f.turns.begin(); it != f.turns.end(); ++it)
    if (it->first == turn) {
      if (f.bulk_done <= it->second) emu_wgmma_fail("a turn passed on before its bulk copies were waited for");
      f.turns.erase(it);
      *turn = next;
      return;
    }
  emu_wgmma_fail("a turn passed on that this thread did not take");
}

// Element (row, k) of an operand with 128-byte swizzling at descriptor desc (k < 16): K-major,
// row along the tile's rows and k along a row; or N-major, k along the rows (8 a group) and row
// along a row, 64 a panel.
inline float emu_desc_read(uint64_t desc, int row, int k, bool n_major) {
  const uint64_t start = (desc & 0x3fff) << 4, leading = ((desc >> 16) & 0x3fff) << 4,
                 stride = ((desc >> 32) & 0x3fff) << 4;
  if (desc >> 62 != 1) emu_wgmma_fail("only the 128-byte swizzle is emulated");
  if ((desc >> 49) & 7) emu_wgmma_fail("a nonzero base offset is not emulated");
  if (!n_major && ((start >> 7) & 7 || start % 128 > 96))
    emu_wgmma_fail("a K-major k16 slice must start in the first row of a 1024-byte aligned tile");
  if (n_major && start % 1024 != 0) emu_wgmma_fail("an N-major k16 slice must start on a 1024-byte boundary");
  const uint64_t linear = n_major ? start + (row / 64) * leading + (k / 8) * stride + (k % 8) * 128 + 2 * (row % 64)
                                  : start + (row / 8) * stride + (row % 8) * 128 + 2 * k;
  const uint64_t physical = linear ^ (((linear >> 7) & 7) << 4);
  uint16_t bits;
  std::memcpy(&bits, emu::shared_at(physical, 2), 2);
  return __bfloat162float({bits});
}

// One mma: a_regs null reads A through desc_a.
inline void emu_wgmma(float* d, int n, const uint32_t* a_regs, uint64_t desc_a, uint64_t desc_b, bool b_n_major,
                      bool accumulate) {
  emu::Block& blk = emu::blk();
  if (blockDim.x % 128 != 0) emu_wgmma_fail("the block is not whole warpgroups");
  const unsigned tid = threadIdx.x, first = tid / 128 * 128, warp = tid % 128 / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; i++) blk.frag[size_t(tid) * 6 + i] = a_regs ? a_regs[i] : 0u;
  blk.descs[size_t(tid) * 2] = desc_a, blk.descs[size_t(tid) * 2 + 1] = desc_b;
  emu_sync_warpgroup();
  if ((!a_regs && blk.descs[size_t(first) * 2] != desc_a) || blk.descs[size_t(first) * 2 + 1] != desc_b)
    emu_wgmma_fail("the threads of a warpgroup gave different descriptors");
  // a_rows[h][k] = A[16 warp + g + 8 h][k]: from the registers of the 4 lanes of this row group
  float a_rows[2][16];
  if (a_regs)
    for (int tt = 0; tt < 4; tt++) {
      const uint32_t* f = &blk.frag[size_t(first + 32 * warp + 4 * g + tt) * 6];
      for (int e = 0; e < 2; e++) {
        auto half = [&](uint32_t w) { return __bfloat162float({uint16_t(e ? w >> 16 : w & 0xffffu)}); };
        a_rows[0][2 * tt + e] = half(f[0]), a_rows[1][2 * tt + e] = half(f[1]);
        a_rows[0][2 * tt + 8 + e] = half(f[2]), a_rows[1][2 * tt + 8 + e] = half(f[3]);
      }
    }
  emu_sync_warpgroup();
  const bool from_regs = a_regs != nullptr;
  uint32_t a_issued[4] = {};
  if (from_regs) std::memcpy(a_issued, a_regs, sizeof a_issued);
  emu::me().wgmma_open.push_back([=]() mutable {
    if (from_regs && std::memcmp(a_regs, a_issued, sizeof a_issued) != 0)
      emu_wgmma_fail("A's registers were written before the wait_group that retires the product");
    if (!from_regs)
      for (int h = 0; h < 2; h++)
        for (int k = 0; k < 16; k++) a_rows[h][k] = emu_desc_read(desc_a, 16 * warp + g + 8 * h, k, false);
    for (int i = 0; i < n / 2; i++) {
      const int h = i % 4 / 2, col = 8 * (i / 4) + 2 * t + i % 2;
      float s = 0.f;
      for (int k = 0; k < 16; k++) s += a_rows[h][k] * emu_desc_read(desc_b, col, k, b_n_major);
      d[i] = accumulate ? d[i] + s : s;
    }
  });
}

// Named barriers: the block's barrier `id` expects `threads` arrivals (every use of an id must
// agree); sync parks this thread until they are in (a group barrier, as __syncthreads), arrive
// only counts it; a block that ends with arrivals nobody waited for aborts (emu.h). The register
// moves have nothing to do here.
inline emu::Barrier& emu_named_barrier(int id, int threads) {
  if (id < 1 || id > 15 || threads % 32 != 0 || threads > int(blockDim.x))
    emu_wgmma_fail("a named barrier is id 1 .. 15 over a multiple of 32 threads of the block");
  emu::Barrier& bar = emu::blk().named_bars[id];
  if (bar.expected == 0) bar.expected = threads;
  if (bar.expected != threads) emu_wgmma_fail("a named barrier used with two thread counts");
  return bar;
}
inline void named_barrier_sync(int id, int threads) {
  emu::Barrier& bar = emu_named_barrier(id, threads);
  emu::me().at_group_barrier = true;
  emu::arrive_wait(bar);
  emu::me().at_group_barrier = false;
}
inline void named_barrier_arrive(int id, int threads) {
  emu::Barrier& bar = emu_named_barrier(id, threads);
  emu::blk().progress++;
  if (++bar.arrived == bar.expected) bar.arrived = 0, bar.gen++;
}
template <int REGS>
inline void warpgroup_reg_dealloc() {}
template <int REGS>
inline void warpgroup_reg_alloc() {}

template <int N, bool B_N_MAJOR = false>
inline void wgmma_m64k16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  static_assert(N == 64 || N == 128, "wgmma_m64k16: N is 64 or 128");
  emu_wgmma(d, N, nullptr, desc_a, desc_b, B_N_MAJOR, accumulate);
}
template <int N, bool B_N_MAJOR = false>
inline void wgmma_m64k16(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
  static_assert(N == 64 || N == 128, "wgmma_m64k16: N is 64 or 128");
  emu_wgmma(d, N, a, 0, desc_b, B_N_MAJOR, accumulate);
}

}  // namespace hla::cuda
