// Tensor basics: bf16 rounding, seeded random values, views, dtype conversion.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "tensor/tensor.h"

using namespace hla;

TEST_CASE("bf16 rounds to nearest, ties to even") {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties go to the even (1.0).
  CHECK(bf16_bits_to_f32(f32_to_bf16_bits(1.0f + 1.0f / 256)) == 1.0f);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd mantissa) and 1.015625 (even): goes up.
  CHECK(bf16_bits_to_f32(f32_to_bf16_bits(1.0f + 3.0f / 256)) == 1.015625f);
  // just above the halfway point rounds up
  CHECK(bf16_bits_to_f32(f32_to_bf16_bits(1.0f + 1.0f / 256 + 1.0f / 65536)) == 1.0078125f);
  CHECK(bf16_bits_to_f32(f32_to_bf16_bits(-2.5f)) == -2.5f);
}

TEST_CASE("bf16 keeps NaN and infinities") {
  float inf = std::numeric_limits<float>::infinity();
  CHECK(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(std::nanf("")))));
  CHECK(bf16_bits_to_f32(f32_to_bf16_bits(inf)) == inf);
  CHECK(bf16_bits_to_f32(f32_to_bf16_bits(-inf)) == -inf);
  // the largest float rounds up to infinity in bf16
  CHECK(bf16_bits_to_f32(f32_to_bf16_bits(std::numeric_limits<float>::max())) == inf);
}

TEST_CASE("seeded random tensors are reproducible and seed-dependent") {
  Tensor a = Tensor::randn({3, 4}, 7);
  Tensor b = Tensor::randn({3, 4}, 7);
  Tensor c = Tensor::randn({3, 4}, 8);
  CHECK(a.to_f64_vector() == b.to_f64_vector());
  CHECK(a.to_f64_vector() != c.to_f64_vector());
  // a prefix of a longer draw is the same values: value i depends on (seed, i) only
  Tensor longer = Tensor::randn({20}, 7);
  auto av = a.to_f64_vector(), lv = longer.to_f64_vector();
  for (int i = 0; i < 12; i++) CHECK(av[i] == lv[i]);
  // moments of a large draw
  Tensor big = Tensor::randn({100000}, 1, 2.0, DType::F64);
  double mean = 0, var = 0;
  for (double v : big.to_f64_vector()) mean += v;
  mean /= 100000;
  for (double v : big.to_f64_vector()) var += (v - mean) * (v - mean);
  var /= 100000;
  CHECK(std::abs(mean) < 0.03);
  CHECK(std::abs(var - 4.0) < 0.1);
}

TEST_CASE("reshape and slice0 are views of the same storage") {
  Tensor t = Tensor::from_f64({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor r = t.reshape({3, -1});
  CHECK(r.shape() == Shape{3, 2});
  Tensor row = t.slice0(1, 2);
  CHECK(row.shape() == Shape{1, 3});
  CHECK(row.to_f64_vector() == std::vector<double>{3, 4, 5});
  row.data<float>()[0] = 42;
  CHECK(t.to_f64_vector()[3] == 42);
  CHECK_THROWS_WITH_AS(t.reshape({4, 2}), doctest::Contains("cannot reshape"), Error);
}

TEST_CASE("dtype conversion round trips") {
  Tensor f = Tensor::from_f64({1.5, -2.25, 0.125, 65504}, {4}, DType::F64);
  CHECK(f.to(DType::F32).to(DType::F64).to_f64_vector() == f.to_f64_vector());
  Tensor b = f.to(DType::BF16);
  CHECK(b.to_f64_vector()[0] == 1.5);
  CHECK(b.to_f64_vector()[1] == -2.25);
  CHECK(Tensor::from_i32({1, -7}, {2}).to(DType::F32).to_f64_vector() == std::vector<double>{1, -7});
}

TEST_CASE("rank above 5 is rejected with the shape") {
  CHECK_THROWS_WITH_AS(Tensor::empty({1, 1, 1, 1, 1, 1}, DType::F32), doctest::Contains("rank 6"), Error);
}

TEST_CASE("element and byte counts that overflow int64 are rejected, not wrapped") {
  CHECK_THROWS_WITH_AS(shape_numel({int64_t(1) << 32, int64_t(1) << 32}),
                       doctest::Contains("shape (4294967296, 4294967296): element count overflows int64"), Error);
  CHECK(shape_numel({int64_t(1) << 31, int64_t(1) << 31}) == int64_t(1) << 62);
  CHECK_THROWS_WITH_AS(Tensor::empty({int64_t(1) << 62}, DType::F32),
                       doctest::Contains("shape (4611686018427387904,) F32: byte count overflows int64"), Error);
  CHECK(shape_nbytes({int64_t(1) << 60}, DType::F32) == int64_t(1) << 62);
}
