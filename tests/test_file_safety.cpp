// tensor/json.h (bounded nesting depth, short excerpts for JSON read from user files) and
// tensor/atomic_file.h (writes that never leave a partial file or lose the previous one).
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tensor/atomic_file.h"
#include "tensor/json.h"
#include "tests/test_full_disk.h"

using namespace hla;

static std::string nested_arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST_CASE("parse_json accepts kMaxJsonDepth levels and refuses one more, naming the file") {
  CHECK(parse_json(nested_arrays(kMaxJsonDepth), "ok.json").is_array());
  CHECK_THROWS_WITH_AS(parse_json(nested_arrays(kMaxJsonDepth + 1), "deep.json"),
                       "deep.json: JSON nested deeper than 64 levels", Error);
  std::string objects;
  for (int i = 0; i < kMaxJsonDepth + 1; i++) objects += "{\"a\":";
  objects += "1" + std::string(kMaxJsonDepth + 1, '}');
  CHECK_THROWS_AS(parse_json(objects, "objects.json"), Error);
}

TEST_CASE("parse_json survives 100,000 levels of nesting with an error, not a stack overflow") {
  CHECK_THROWS_WITH_AS(parse_json(nested_arrays(100000), "hostile.json"),
                       "hostile.json: JSON nested deeper than 64 levels", Error);
}

TEST_CASE("parse_json names the file on a syntax error") {
  CHECK_THROWS_WITH_AS(parse_json("{\"a\": ", "broken.json"), doctest::Contains("broken.json: not valid JSON"), Error);
}

TEST_CASE("json_excerpt quotes at most 100 characters") {
  nlohmann::json big = std::string(500, 'x');
  std::string e = json_excerpt(big);
  CHECK(e.size() == 103);
  CHECK(e.substr(100) == "...");
  CHECK(json_excerpt(nlohmann::json(42)) == "42");
}

// ---- tensor/atomic_file.h ----

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
size_t files_in(const std::filesystem::path& dir) {
  size_t n = 0;
  for (auto it = std::filesystem::directory_iterator(dir); it != std::filesystem::directory_iterator(); ++it) n++;
  return n;
}
}  // namespace

TEST_CASE("write_file_atomic replaces the file and leaves no temporary behind") {
  auto dir = std::filesystem::temp_directory_path() / ("hla-atomic-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "out.json").string();
  write_file_atomic(path, "first");
  write_file_atomic(path, "second");
  CHECK(slurp(path) == "second");
  CHECK(files_in(dir) == 1);
  {
    AtomicFile abandoned(path);
    abandoned.write("partial");
  }  // no commit: the old file stays, the temporary goes
  CHECK(slurp(path) == "second");
  CHECK(files_in(dir) == 1);
  CHECK_THROWS_WITH_AS(write_file_atomic((dir / "missing" / "x.json").string(), "x"),
                       doctest::Contains("x.json: cannot create"), Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a write that fails (file size limit, as on a full disk) names the file and keeps the old one") {
  auto dir = std::filesystem::temp_directory_path() / ("hla-atomic-full-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "results.json").string();
  write_file_atomic(path, "good");
  const std::string message = testing::error_on_full_disk([&] { write_file_atomic(path, std::string(4096, 'x')); });
  CHECK(message.find("results.json: write failed on") != std::string::npos);
  CHECK(message.find("is unchanged") != std::string::npos);
  CHECK(slurp(path) == "good");
  CHECK(files_in(dir) == 1);
  std::filesystem::remove_all(dir);
}
