// Shard writing and validated reading.
#include "data/shard.h"

#include <algorithm>

#include "data/file_io.h"
#include "tensor/error.h"

namespace hla::data {

namespace {

// Fills `header` from the first 1024 bytes; `available` is how many of them exist.
ShardHeader parse_header(const std::string& path, const int32_t* h, size_t available) {
  if (available < kShardHeaderBytes) {
    fail("shard ", path, ": truncated: ", available, " bytes, smaller than the ",
         kShardHeaderBytes, "-byte header");
  }
  ShardHeader header;
  if (h[0] == kShardMagicU16) {
    header.token_bytes = 2;
    if (h[1] != kShardVersionU16) {
      fail("shard ", path, ": corrupt header: magic ", h[0], " (uint16 tokens) with version ",
           h[1], ", expected ", kShardVersionU16);
    }
  } else if (h[0] == kShardMagicU32) {
    header.token_bytes = 4;
    if (h[1] != kShardVersionU32) {
      fail("shard ", path, ": corrupt header: magic ", h[0], " (uint32 tokens) with version ",
           h[1], ", expected ", kShardVersionU32);
    }
  } else {
    fail("shard ", path, ": bad magic ", h[0], " (expected ", kShardMagicU16, " for uint16 or ",
         kShardMagicU32, " for uint32 tokens): not an llm.c/hla token shard");
  }
  if (h[2] < 0) fail("shard ", path, ": corrupt header: negative token count ", h[2]);
  header.num_tokens = h[2];
  return header;
}

void check_body_size(const std::string& path, const ShardHeader& header, uint64_t body_bytes) {
  uint64_t expected = uint64_t(header.num_tokens) * header.token_bytes;
  if (body_bytes < expected) {
    fail("shard ", path, ": truncated: header says ", header.num_tokens, " tokens (", expected,
         " bytes) but only ", body_bytes, " bytes follow the header");
  }
  if (body_bytes > expected) {
    fail("shard ", path, ": corrupt: header says ", header.num_tokens, " tokens (", expected,
         " bytes) but ", body_bytes, " bytes follow the header");
  }
}

size_t read_fully(FileReader& in, char* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t k = in.read(dst + got, n - got);
    if (k == 0) break;
    got += k;
  }
  return got;
}

}  // namespace

int token_bytes_for_vocab(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

void write_shard(const std::string& path, const int32_t* tokens, size_t count, int token_bytes,
                 int zstd_level, int zstd_workers) {
  HLA_CHECK(token_bytes == 2 || token_bytes == 4, "token_bytes must be 2 or 4, got ", token_bytes);
  HLA_CHECK(count <= size_t(INT32_MAX), "shard ", path, ": ", count,
            " tokens do not fit the int32 count of the header");
  int32_t header[kShardHeaderInts] = {};
  header[0] = token_bytes == 2 ? kShardMagicU16 : kShardMagicU32;
  header[1] = token_bytes == 2 ? kShardVersionU16 : kShardVersionU32;
  header[2] = static_cast<int32_t>(count);
  FileWriter out(path, ends_with(path, ".zst") ? zstd_level : 0, zstd_workers);
  out.write(header, sizeof header);
  const int64_t max_token = token_bytes == 2 ? 0xFFFF : INT32_MAX;
  std::vector<uint8_t> chunk;  // (n, token_bytes) little-endian
  const size_t kChunkTokens = 1 << 20;
  for (size_t start = 0; start < count; start += kChunkTokens) {
    size_t n = std::min(kChunkTokens, count - start);
    chunk.resize(n * token_bytes);
    for (size_t i = 0; i < n; i++) {
      int32_t t = tokens[start + i];
      HLA_CHECK(t >= 0 && t <= max_token, "shard ", path, ": token ", t, " at position ",
                start + i, " does not fit ", token_bytes * 8, " bits");
      for (int b = 0; b < token_bytes; b++) chunk[i * token_bytes + b] = uint8_t(uint32_t(t) >> (8 * b));
    }
    out.write(chunk.data(), chunk.size());
  }
  out.close();
}

ShardData read_shard(const std::string& path) {
  FileReader in(path);
  int32_t h[kShardHeaderInts];
  ShardData data;
  data.header = parse_header(path, h, read_fully(in, reinterpret_cast<char*>(h), kShardHeaderBytes));
  // The body grows with what was actually read, one chunk at a time, so a header that claims
  // 2^31 tokens over a few bytes (a .bin.zst has no size to check first) fails as truncated
  // without allocating the claimed gigabytes.
  const uint64_t expected = uint64_t(data.header.num_tokens) * data.header.token_bytes;
  const uint64_t kChunkBytes = uint64_t(16) << 20;
  uint64_t got = 0;
  while (got < expected) {
    data.body.resize(got + std::min(kChunkBytes, expected - got));
    uint64_t n = read_fully(in, reinterpret_cast<char*>(data.body.data() + got), data.body.size() - got);
    got += n;
    if (got < data.body.size()) break;
  }
  data.body.resize(got);
  char extra;
  if (got == expected) got += read_fully(in, &extra, 1);
  check_body_size(path, data.header, got);
  return data;
}

int64_t first_token_outside(const uint8_t* body, int64_t count, int token_bytes, int64_t vocab_size) {
  for (int64_t i = 0; i < count; i++)
    if (decode_token(body + i * token_bytes, token_bytes) >= vocab_size) return i;
  return -1;
}

ShardHeader check_shard_tokens(const std::string& path, int64_t vocab_size) {
  FileReader in(path);
  int32_t h[kShardHeaderInts];
  const ShardHeader header = parse_header(path, h, read_fully(in, reinterpret_cast<char*>(h), kShardHeaderBytes));
  const int tb = header.token_bytes;
  std::vector<uint8_t> chunk(size_t(1 << 20) * tb);
  uint64_t body_bytes = 0;
  for (size_t got; (got = read_fully(in, reinterpret_cast<char*>(chunk.data()), chunk.size())) > 0; body_bytes += got) {
    const int64_t first = int64_t(body_bytes / tb);
    const int64_t count = std::min(int64_t(got / tb), header.num_tokens - first);
    const int64_t bad = first_token_outside(chunk.data(), count, tb, vocab_size);
    if (bad >= 0) {
      fail("shard ", path, ": token ", decode_token(chunk.data() + bad * tb, tb), " at index ", first + bad,
           " (byte offset ", kShardHeaderBytes + (first + bad) * tb, ") is outside the vocabulary of ", vocab_size,
           " tokens");
    }
  }
  check_body_size(path, header, body_bytes);
  return header;
}

std::vector<int32_t> read_shard_tokens(const std::string& path) {
  ShardData data = read_shard(path);
  std::vector<int32_t> tokens(data.header.num_tokens);
  for (int64_t i = 0; i < data.header.num_tokens; i++) tokens[i] = data.token(i);
  return tokens;
}

}  // namespace hla::data
