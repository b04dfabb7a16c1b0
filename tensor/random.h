// Counter-based random numbers: value i of stream `seed` is a pure function of (seed, i),
// so the same seed gives the same tensor on every device and in any order of generation.
#pragma once
#include <cmath>
#include <cstdint>

namespace hla {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) with 53 random bits.
inline double counter_uniform(uint64_t seed, uint64_t i, uint64_t lane = 0) {
  uint64_t h = splitmix64(splitmix64(seed) ^ (i * 2 + lane) * 0xD1B54A32D192ED03ull);
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller over two counter uniforms.
inline double counter_normal(uint64_t seed, uint64_t i) {
  double u1 = counter_uniform(seed, i, 0);
  double u2 = counter_uniform(seed, i, 1);
  double r = std::sqrt(-2.0 * std::log(1.0 - u1));
  return r * std::cos(6.283185307179586 * u2);
}

// A small sequential generator for data pipelines and samplers (not for tensors).
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(splitmix64(seed)) {}
  uint64_t next() { return splitmix64(state++); }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
};

}  // namespace hla
