// Data files under faults and hostile input: shard and stream writes on a full disk fail naming
// the file and keep the previous file; a shard header's token count cannot make the reader
// allocate what the file does not hold; corpus JSONL nesting is bounded.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <cstring>

#include "data/corpus.h"
#include "data/shard.h"
#include "tests/test_data_util.h"
#include "tests/test_full_disk.h"

using namespace hla::data;
using namespace hla::data::testing;

namespace {

size_t files_in(const ScratchDir& dir) {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir.path), {}));
}

// The process's peak resident memory so far, in bytes.
int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

}  // namespace

TEST_CASE("FileWriter on a full disk fails naming the file and errno, and keeps the old file") {
  for (const char* name : {"out.bin", "out.bin.zst"}) {
    ScratchDir dir("fw-full");
    const std::string path = dir / name;
    write_file(path, "old contents");
    const std::string big = random_bytes(7, 1 << 20);  // incompressible
    std::string message = hla::testing::error_on_full_disk([&] { write_file(path, big); }, 4096);
    CAPTURE(message);
    CHECK(message.find(path + ": write failed on " + path + ".tmp-") == 0);
    CHECK(message.find("(File too large); " + path + " is unchanged") != std::string::npos);
    CHECK(FileReader(path).read_all() == "old contents");
    CHECK(files_in(dir) == 1);
  }
}

TEST_CASE("a shard written on a full disk leaves the previous shard whole") {
  ScratchDir dir("shard-full");
  const std::string path = dir / "train_000000.bin";
  const std::vector<int32_t> old_tokens = {1, 2, 3};
  write_shard(path, old_tokens.data(), old_tokens.size(), 2);
  std::vector<int32_t> tokens(100000, 7);
  std::string message = hla::testing::error_on_full_disk([&] { write_shard(path, tokens.data(), tokens.size(), 2); }, 4096);
  CHECK(message.find(path + ": write failed on") == 0);
  CHECK(read_shard_tokens(path) == old_tokens);
  CHECK(files_in(dir) == 1);
}

TEST_CASE("corpus JSONL: deep nesting is refused naming the file and line") {
  ScratchDir dir("corpus-deep");
  write_file(dir / "c.jsonl", "{\"text\": \"ok\"}\n{\"text\": " + std::string(100000, '[') + std::string(100000, ']') + "}\n");
  CHECK_THROWS_WITH_AS(read_corpus({dir / "c.jsonl"}, {}),
                       (dir / "c.jsonl" + ":2: JSON nested deeper than 64 levels").c_str(), hla::Error);
}

TEST_CASE("a shard header claiming 2^31 tokens over 3 tokens fails as truncated without allocating the claim") {
  // The claim is 4 GiB of uint16 tokens; the reader may hold what it read plus one chunk.
  ScratchDir dir("shard-huge-count");
  const std::vector<int32_t> tokens = {1, 2, 3};
  for (const char* name : {"huge.bin", "huge.bin.zst"}) {
    const std::string path = dir / name;
    write_shard(path, tokens.data(), tokens.size(), 2);
    std::string bytes = FileReader(path).read_all();
    const int32_t claimed = INT32_MAX;
    std::memcpy(&bytes[2 * sizeof(int32_t)], &claimed, sizeof claimed);
    write_file(path, bytes);
    const int64_t peak_before = peak_rss_bytes();
    CHECK_THROWS_WITH_AS(read_shard(path),
                         ("shard " + path + ": truncated: header says 2147483647 tokens (4294967294 bytes) but only 6 "
                          "bytes follow the header").c_str(),
                         hla::Error);
    CHECK(peak_rss_bytes() - peak_before < (int64_t(256) << 20));
  }
}
