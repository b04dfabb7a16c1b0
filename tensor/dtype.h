// Element types and devices, and the bf16 <-> f32 conversion every backend shares.
// bf16 is the top half of an IEEE float; conversion rounds to nearest, ties to even,
// and keeps NaN a (quiet) NaN.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace hla {

enum class DType { F32, BF16, F64, I32, U16 };
enum class Device { CPU, CUDA };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::U16: return 2;
  }
  return 0;
}

// Names as safetensors writes them.
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::U16: return "U16";
  }
  return "?";
}

bool dtype_from_name(const std::string& name, DType* out);

inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

inline bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F64; }

struct bf16 {
  uint16_t bits;
};

inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN stays NaN (quiet bit set)
  }
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float bf16_bits_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace hla
