// Emulated mma.m16n8k16 bf16 (PTX ISA fragment layouts, fp32 accumulate), ldmatrix (x4, plain
// and transposed) and cp.async (copies deferred until cp_async_wait_all or the cp_async_wait
// that retires their group, and optionally landed at issue as well).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace hla::cuda {

inline float emu_lo(uint32_t w) { return __bfloat162float({uint16_t(w & 0xffffu)}); }
inline float emu_hi(uint32_t w) { return __bfloat162float({uint16_t(w >> 16)}); }

inline void mma_bf16_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  emu::Block& blk = emu::blk();
  const unsigned tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  uint32_t* mine = &blk.frag[size_t(tid) * 6];
  for (int i = 0; i < 4; i++) mine[i] = a[i];
  mine[4] = b0, mine[5] = b1;
  __syncwarp();
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; l++) {
    const uint32_t* f = &blk.frag[size_t(warp * 32 + l) * 6];
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 2; e++) {
      auto half = [&](uint32_t w) { return e ? emu_hi(w) : emu_lo(w); };
      A[g][2 * t + e] = half(f[0]);
      A[g + 8][2 * t + e] = half(f[1]);
      A[g][2 * t + 8 + e] = half(f[2]);
      A[g + 8][2 * t + 8 + e] = half(f[3]);
      B[2 * t + e][g] = half(f[4]);
      B[2 * t + 8 + e][g] = half(f[5]);
    }
  }
  __syncwarp();
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; i++) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float s = 0.f;
    for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
    c[i] += s;
  }
}

// ldmatrix.m8n8.x4: lanes 8i..8i+7 give the row addresses of 8x8 b16 matrix i (exchanged through
// the warp); register i of lane l receives matrix i's (row l/4, columns 2(l%4), +1), or with
// trans the transposed matrix's, i.e. (rows 2(l%4), +1, column l/4).
inline void emu_ldmatrix(uint32_t r[4], const void* smem, bool trans) {
  emu::Block& blk = emu::blk();
  const unsigned tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  blk.addr[tid] = smem;
  __syncwarp();
  auto at = [&](int i, int row, int col) {
    uint16_t v;
    std::memcpy(&v, static_cast<const char*>(blk.addr[warp * 32 + 8 * i + row]) + 2 * col, 2);
    return uint32_t(v);
  };
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; i++)
    r[i] = trans ? at(i, 2 * t, g) | at(i, 2 * t + 1, g) << 16 : at(i, g, 2 * t) | at(i, g, 2 * t + 1) << 16;
  __syncwarp();
}
inline void ldmatrix_x4(uint32_t r[4], const void* smem) { emu_ldmatrix(r, smem, false); }
inline void ldmatrix_x4_trans(uint32_t r[4], const void* smem) { emu_ldmatrix(r, smem, true); }

inline void emu_land(const emu::Copy& c) {
  if (c.valid) std::memcpy(c.dst, c.src, 16);
  else std::memset(c.dst, 0, 16);
}
// A copy lands at the wait; with emu::cp_async_lands_at_issue also at once (so that a copy
// issued while another thread still reads its destination shows as a wrong result).
inline void cp_async_16(void* smem, const void* gmem, bool valid) {
  const emu::Copy c{smem, gmem, valid};
  if (emu::cp_async_lands_at_issue) emu_land(c);
  emu::me().pending.push_back(c);
}
inline void cp_async_commit() {
  emu::Fiber& f = emu::me();
  size_t committed = 0;
  for (size_t n : f.copy_groups) committed += n;
  f.copy_groups.push_back(f.pending.size() - committed);
}
inline void cp_async_wait_all() {
  for (const emu::Copy& c : emu::me().pending) emu_land(c);
  emu::me().pending.clear();
  emu::me().copy_groups.clear();
}
// The oldest committed groups land until PENDING are left.
template <int PENDING>
inline void cp_async_wait() {
  emu::Fiber& f = emu::me();
  while (int(f.copy_groups.size()) > PENDING) {
    const size_t n = f.copy_groups.front();
    for (size_t i = 0; i < n; i++) emu_land(f.pending[i]);
    f.pending.erase(f.pending.begin(), f.pending.begin() + n);
    f.copy_groups.pop_front();
  }
}

inline uint32_t pack_bf16(float lo, float hi) {
  return uint32_t(__float2bfloat16_rn(lo).bits) | (uint32_t(__float2bfloat16_rn(hi).bits) << 16);
}

}  // namespace hla::cuda
