// safetensors: bit-exact round trip for every dtype, F16 read widened to F32 exactly, and each
// corrupt file rejected with a message naming the file and the tensor.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tensor/random.h"
#include "tensor/safetensors.h"
#include "tests/test_full_disk.h"
#include "tests/test_half.h"

using namespace hla;
using hla::testing::to_half;

namespace {

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("hla_test_") + name + ".safetensors")).string();
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file with a hand-written header and `data_bytes` zero bytes of data.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; i++) out[i] = static_cast<char>(n >> (8 * i));
  out += header;
  out.append(data_bytes, '\0');
  write_all(path, out);
}

doctest::Contains has(const std::string& part) { return doctest::Contains(part.c_str()); }

// The message of the Error that loading `path` throws ("" when it loads).
std::string load_error(const std::string& path) {
  try {
    load_safetensors(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("safetensors round trip is bit-exact for every dtype") {
  std::string path = temp_path("roundtrip");
  NamedTensors in;
  in.emplace_back("f32", Tensor::randn({3, 4}, 1, 1.0, DType::F32));
  in.emplace_back("bf16", Tensor::randn({5}, 2, 1.0, DType::BF16));
  in.emplace_back("f64", Tensor::randn({2, 2, 2}, 3, 1.0, DType::F64));
  in.emplace_back("i32", Tensor::from_i32({-5, 0, 2147483647}, {3}));
  in.emplace_back("u16", Tensor::from_f64({0, 1, 65535}, {3}, DType::U16));
  in.emplace_back("scalar", Tensor::full({}, 2.5, DType::F32));
  save_safetensors(path, in, {{"format", "pt"}});
  SafetensorsFile out = load_safetensors(path);
  REQUIRE(out.tensors.size() == in.size());
  CHECK(out.metadata.at("format") == "pt");
  for (size_t i = 0; i < in.size(); i++) {
    CHECK(out.tensors[i].first == in[i].first);
    CHECK(out.tensors[i].second.shape() == in[i].second.shape());
    CHECK(out.tensors[i].second.dtype() == in[i].second.dtype());
    CHECK(std::memcmp(out.tensors[i].second.raw(), in[i].second.raw(), in[i].second.nbytes()) == 0);
  }
  std::remove(path.c_str());
}

TEST_CASE("F16 tensors are read widened to F32, exactly: normals, subnormals, zeros, inf, NaN") {
  std::string path = temp_path("half");
  // bits -> the value, written out: (-1)^s 2^(e - 15) (1 + f / 1024), or f 2^-24 for e = 0.
  const std::vector<std::pair<uint16_t, float>> cases = {
      {0x3c00, 1.0f},        {0xc000, -2.0f},     {0x3555, 0x1.554p-2f}, {0x7bff, 65504.0f},
      {0x0400, 0x1p-14f},    {0x03ff, 0x1.ff8p-15f}, {0x0001, 0x1p-24f},  {0x8001, -0x1p-24f},
      {0x0000, 0.0f},        {0x8000, -0.0f},     {0x7c00, INFINITY},    {0xfc00, -INFINITY}};
  const std::vector<uint16_t> nans = {0x7e00, 0x7c01, 0xfe00};
  std::string data;
  for (uint16_t bits : nans) data += std::string{static_cast<char>(bits & 0xff), static_cast<char>(bits >> 8)};
  for (const auto& [bits, value] : cases) data += std::string{static_cast<char>(bits & 0xff), static_cast<char>(bits >> 8)};
  const size_t n = nans.size() + cases.size();
  const std::string header = R"({"h":{"dtype":"F16","shape":[)" + std::to_string(n) + R"(],"data_offsets":[0,)" +
                             std::to_string(2 * n) + "]}}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; i++) bytes[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  write_all(path, bytes + header + data);
  SafetensorsFile file = load_safetensors(path);
  const Tensor& h = file.get("h");
  CHECK(h.dtype() == DType::F32);
  CHECK(h.shape() == Shape{static_cast<int64_t>(n)});
  CHECK(file.widened == std::map<std::string, std::string>{{"h", "F16"}});
  const float* got = h.data<float>();
  for (size_t i = 0; i < nans.size(); i++) CHECK(std::isnan(got[i]));
  CHECK(std::signbit(got[2]));  // 0xfe00 is a negative NaN
  for (size_t i = 0; i < cases.size(); i++) {
    CAPTURE(cases[i].first);
    CHECK(std::memcmp(&got[nans.size() + i], &cases[i].second, 4) == 0);  // bit for bit: -0 is not +0
  }
  // The test's writer (rounding on the value) agrees with the table, so the round trip below
  // checks the reader against an independent encoder.
  for (const auto& [bits, value] : cases) CHECK(to_half(value).bits == bits);
  std::remove(path.c_str());
}

TEST_CASE("fp32 -> F16 file -> fp32 gives the values rounded to half, ties to even") {
  std::string path = temp_path("half_roundtrip");
  std::vector<double> values;
  for (int i = 0; i < 4096; i++) values.push_back(std::ldexp(0.5 + hla::counter_uniform(11, i), (i % 46) - 28) *
                                                  (i % 3 == 0 ? -1 : 1));  // 2^-29 (to 0) .. 2^17 (inf)
  for (double tie : {1.0 + 0x1p-11, 1.0 + 3 * 0x1p-11, 0x1p-24 * 0.5, 0x1p-24 * 1.5, 65520.0, 65519.0})
    values.push_back(tie);  // ties go to the even neighbour; 65520 rounds to inf
  const Tensor x = Tensor::from_f64(values, {static_cast<int64_t>(values.size())}, DType::F32);
  hla::testing::save_half_safetensors(path, {{"x", x}});
  const Tensor back = load_safetensors(path).get("x");
  const std::vector<double> input = x.to_f64_vector(), output = back.to_f64_vector();
  int mismatches = 0, subnormal = 0, infinite = 0;
  for (size_t i = 0; i < input.size(); i++) {
    const float want = to_half(static_cast<float>(input[i])).value;
    mismatches += !(static_cast<float>(output[i]) == want && std::signbit(output[i]) == std::signbit(want));
    subnormal += want != 0 && std::fabs(want) < 0x1p-14f;
    infinite += std::isinf(want);
  }
  CHECK(mismatches == 0);
  CHECK(subnormal > 100);  // the range reaches both ends
  CHECK(infinite > 100);
  const size_t t = values.size() - 6;
  CHECK(output[t] == 1.0);                 // 1 + 2^-11: halfway between 1 and 1 + 2^-10, even is 1
  CHECK(output[t + 1] == 1.0 + 0x1p-9);    // 1 + 3 * 2^-11: even neighbour is 1 + 2^-9
  CHECK(output[t + 2] == 0.0);             // half the smallest subnormal: even is 0
  CHECK(output[t + 3] == 0x1p-23);         // 1.5 subnormal ulps: even is 2 ulps
  CHECK(std::isinf(output[t + 4]));
  CHECK(output[t + 5] == 65504.0);
  std::remove(path.c_str());
}

TEST_CASE("corrupt safetensors files are rejected with the file and tensor named") {
  std::string path = temp_path("corrupt");
  save_safetensors(path, {{"w", Tensor::randn({4, 4}, 1)}});
  std::string good = read_all(path);

  SUBCASE("truncated file") {
    write_all(path, good.substr(0, good.size() - 10));
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("'w'"), Error);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains(path.c_str()), Error);
  }
  SUBCASE("shorter than the length field") {
    write_all(path, good.substr(0, 5));
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("truncated"), Error);
  }
  SUBCASE("bad header length") {
    std::string bad = good;
    bad[7] = 0x10;  // an enormous header length
    write_all(path, bad);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("bad header length"), Error);
  }
  SUBCASE("header is not JSON") {
    write_raw(path, "{not json", 0);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("not valid JSON"), Error);
  }
  SUBCASE("unknown dtype") {
    write_raw(path, R"({"w":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})", 2);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("'w': unknown dtype F8"), Error);
  }
  SUBCASE("F16 offsets count two bytes an element") {
    write_raw(path, R"({"w":{"dtype":"F16","shape":[3],"data_offsets":[0,12]}})", 12);
    CHECK(load_error(path) == path + ": tensor 'w': data_offsets [0, 12) span 12 bytes but F16 (3,) needs 6");
  }
  SUBCASE("offsets out of range") {
    write_raw(path, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("'w': data_offsets [0, 16) out of range"), Error);
  }
  SUBCASE("offsets disagree with dtype and shape") {
    write_raw(path, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("needs 12"), Error);
  }
  SUBCASE("a header length one byte short: every weight would be read one byte off") {
    std::string bad = good;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= uint64_t(uint8_t(bad[i])) << (8 * i);
    REQUIRE(bad[8 + n - 1] == ' ');  // the header is padded, so its JSON still parses
    bad[0] = static_cast<char>(n - 1);
    REQUIRE(n - 1 < 256);
    write_all(path, bad);
    CHECK_THROWS_WITH_AS(load_safetensors(path),
                         has(path + ": 1 byte(s) of the data section after the last tensor 'w'"), Error);
  }
  SUBCASE("bytes that belong to no tensor: before the first, between two, after the last") {
    write_raw(path, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8);
    CHECK_THROWS_WITH_AS(load_safetensors(path),
                         has(path + ": bytes [0, 4) of the data section belong to no tensor (before 'a')"),
                         Error);
    write_raw(path,
              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
              16);
    CHECK_THROWS_WITH_AS(load_safetensors(path),
                         doctest::Contains("bytes [8, 12) of the data section belong to no tensor (between 'a' and 'b')"),
                         Error);
    write_raw(path, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 11);
    CHECK_THROWS_WITH_AS(load_safetensors(path),
                         doctest::Contains("3 byte(s) of the data section after the last tensor 'a'"), Error);
    write_raw(path, R"({"__metadata__":{"format":"pt"}})", 5);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("5 byte(s) of the data section but no tensors"),
                         Error);
  }
  SUBCASE("a tensor name used twice") {
    write_raw(path,
              R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
              16);
    CHECK_THROWS_WITH_AS(load_safetensors(path), has(path + ": tensor name 'w' appears twice"), Error);
  }
  SUBCASE("a field given twice in one entry or in __metadata__ (nlohmann would keep the last)") {
    write_raw(path, R"({"w":{"dtype":"F32","shape":[4],"shape":[2],"data_offsets":[0,8]}})", 8);
    CHECK_THROWS_WITH_AS(load_safetensors(path),
                         (path + ": tensor 'w': field 'shape' appears twice in its entry").c_str(), Error);
    write_raw(path, R"({"__metadata__":{"format":"pt","format":"np"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8);
    CHECK_THROWS_WITH_AS(load_safetensors(path), (path + ": __metadata__ key 'format' appears twice").c_str(), Error);
    // the same key in two different entries is no repeat
    write_raw(path,
              R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              8);
    CHECK(load_safetensors(path).tensors.size() == 2);
  }
  SUBCASE("element or byte counts that overflow 64 bits") {
    // 2^32 x 2^32 elements wraps to 0, so offsets [0, 0) used to match
    write_raw(path, R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0);
    CHECK_THROWS_WITH_AS(load_safetensors(path), has(path + ": tensor 'w': shape (4294967296, 4294967296)"),
                         Error);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("element count overflows int64"), Error);
    // 2^62 elements fit int64, but 2^62 x 4 bytes wraps to 0
    write_raw(path, R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("'w': shape (4611686018427387904,) F32: byte count overflows int64"),
                         Error);
  }
  SUBCASE("shapes that are not lists of non-negative integers, at most rank 5") {
    write_raw(path, R"({"w":{"dtype":"F32","shape":[-2,-1],"data_offsets":[0,8]}})", 8);
    CHECK_THROWS_WITH_AS(load_safetensors(path), has(path + ": tensor 'w': negative dimension in shape (-2, -1)"),
                         Error);
    write_raw(path, R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("'w': shape [2.5] is not a list of integers"), Error);
    write_raw(path, R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1],"data_offsets":[0,4]}})", 4);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("'w': tensor rank 6 exceeds 5"), Error);
  }
  SUBCASE("a dtype that is not a string is quoted by excerpt") {
    std::string long_list = "[1";
    for (int i = 0; i < 300; i++) long_list += ",1";
    long_list += "]";
    write_raw(path, R"({"w":{"dtype":)" + long_list + R"(,"shape":[1],"data_offsets":[0,4]}})", 4);
    std::string message = load_error(path);
    CHECK(message.find("'w': unknown dtype [1,1,1,1") != std::string::npos);
    CHECK(message.size() < path.size() + 200);
  }
  SUBCASE("__metadata__ must be an object of strings") {
    write_raw(path, R"({"__metadata__":["pt"]})", 0);
    CHECK_THROWS_WITH_AS(load_safetensors(path), has(path + ": __metadata__ is not an object of strings"),
                         Error);
    write_raw(path, R"({"__metadata__":{"format":5}})", 0);
    CHECK_THROWS_WITH_AS(load_safetensors(path), has(path + ": __metadata__ 'format' is 5, not a string"),
                         Error);
  }
  SUBCASE("nesting 100,000 levels deep fails at parse time, naming the file") {
    write_raw(path, R"({"__metadata__":)" + std::string(100000, '[') + std::string(100000, ']') + "}", 0);
    CHECK_THROWS_WITH_AS(load_safetensors(path), has(path + ": JSON nested deeper than 64 levels"), Error);
  }
  SUBCASE("errors start with the file, not a source location") {
    write_raw(path, R"({"w":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})", 2);
    CHECK(load_error(path).rfind(path + ": tensor 'w': unknown dtype", 0) == 0);
  }
  SUBCASE("overlapping tensors") {
    write_raw(path,
              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
              12);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("'a' and 'b' overlap"), Error);
  }
  std::remove(path.c_str());
}

TEST_CASE("a failed safetensors write leaves the previous file intact") {
  std::string path = temp_path("atomic");
  save_safetensors(path, {{"w", Tensor::full({2}, 1.0, DType::F32)}});
  std::string before = read_all(path);
  // A name used twice makes the write fail before anything is renamed over the old file.
  CHECK_THROWS_AS(save_safetensors(path, {{"x", Tensor::full({2}, 2.0, DType::F32)},
                                          {"x", Tensor::full({2}, 3.0, DType::F32)}}),
                  Error);
  CHECK(read_all(path) == before);
  // A directory path that cannot be written: the error names the file.
  CHECK_THROWS_WITH_AS(save_safetensors("/nonexistent_dir/x.safetensors", {{"w", Tensor::full({1}, 1.0, DType::F32)}}),
                       doctest::Contains("/nonexistent_dir/x.safetensors: cannot create"), Error);
  // A full disk: the write fails naming the file and the errno text, and the old file stays.
  const std::string full = testing::error_on_full_disk(
      [&] { save_safetensors(path, {{"w", Tensor::full({4096}, 1.0, DType::F32)}}); });
  CHECK(full.find(path + ": write failed on") != std::string::npos);
  CHECK(full.find("File too large") != std::string::npos);
  CHECK(read_all(path) == before);
  std::remove(path.c_str());
}
