// safetensors: bit-exact round trip for every dtype, and each corrupt file rejected with
// a message naming the file and the tensor.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "tensor/safetensors.h"

using namespace hla;

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
  SUBCASE("offsets out of range") {
    write_raw(path, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("'w': data_offsets [0, 16) out of range"), Error);
  }
  SUBCASE("offsets disagree with dtype and shape") {
    write_raw(path, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
    CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("needs 12"), Error);
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
  // A directory path that cannot be written: the error names the temporary file.
  CHECK_THROWS_WITH_AS(save_safetensors("/nonexistent_dir/x.safetensors", {{"w", Tensor::full({1}, 1.0, DType::F32)}}),
                       doctest::Contains("/nonexistent_dir/x.safetensors.tmp"), Error);
  std::remove(path.c_str());
}
