// fp16 (IEEE binary16) files for the tests: hla writes no half tensors, so the tests that read
// them write the file themselves. The rounding is done on the value, in double arithmetic
// (frexp / nearbyint / ldexp), independently of the reader's bit-level widening
// (tensor/safetensors.cpp), so a test that compares the two checks one against the other.
#pragma once
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tensor/safetensors.h"

namespace hla::testing {

// The fp16 nearest to x (round to nearest, ties to even): its bits and its value as a float.
struct Half {
  uint16_t bits;
  float value;
};

inline Half to_half(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  const float sign_f = sign ? -1.0f : 1.0f;
  if (std::isnan(x)) return {static_cast<uint16_t>(sign | 0x7e00), x};
  if (a >= 65520.0) return {static_cast<uint16_t>(sign | 0x7c00), sign_f * INFINITY};  // past 65504 + half an ulp
  if (a < std::ldexp(1.0, -14)) {  // subnormal: a multiple of 2^-24 (1024 of them is the smallest normal)
    const double q = std::nearbyint(std::ldexp(a, 24));
    return {static_cast<uint16_t>(sign | static_cast<uint16_t>(q)), sign_f * static_cast<float>(std::ldexp(q, -24))};
  }
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): the leading bit is 2^(e - 1)
  double q = std::nearbyint(std::ldexp(a, 11 - e));  // 11 significant bits: q in [1024, 2048]
  if (q == 2048) q = 1024, e++;
  const int biased = e - 1 + 15;
  if (biased >= 31) return {static_cast<uint16_t>(sign | 0x7c00), sign_f * INFINITY};
  const uint16_t bits = static_cast<uint16_t>(sign | (biased << 10) | (static_cast<int>(q) - 1024));
  return {bits, sign_f * static_cast<float>(std::ldexp(q, e - 11))};
}

// Writes a safetensors file whose tensors (each an F32 tensor, rounded with to_half) are F16.
inline void save_half_safetensors(const std::string& path, const NamedTensors& tensors) {
  nlohmann::ordered_json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  for (const auto& [name, t] : tensors) {
    const uint64_t begin = data.size();
    for (double v : t.to_f64_vector()) {
      const uint16_t bits = to_half(static_cast<float>(v)).bits;
      data += static_cast<char>(bits & 0xff);
      data += static_cast<char>(bits >> 8);
    }
    header[name] = {{"dtype", "F16"}, {"shape", t.shape()}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string text = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; i++) out[i] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  std::ofstream(path, std::ios::binary) << out << text << data;
}

}  // namespace hla::testing
