// Token shards in llm.c's .bin layout, optionally zstd-compressed as .bin.zst.
//
//   header: 256 x int32 (little-endian): [0] magic, [1] version, [2] token count, rest 0
//   body:   token count x uint16 (magic 20240520, version 1: llm.c's own format)
//        or token count x uint32 (magic 20240801, version 2: hla's variant for vocabularies
//           over 65536 tokens)
//
// A .bin.zst shard is exactly the bytes of the .bin, compressed as one zstd stream. Reading
// validates the header and that the body holds exactly the announced tokens; a bad shard is an
// hla::Error naming the file and what is wrong. check_shard_tokens also checks every token
// against the vocabulary, in one streaming pass (a training run does it for each shard at start).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hla::data {

constexpr int kShardHeaderInts = 256;
constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);
constexpr int32_t kShardMagicU16 = 20240520, kShardVersionU16 = 1;
constexpr int32_t kShardMagicU32 = 20240801, kShardVersionU32 = 2;

// Bytes per token for a vocabulary: 2 up to 65536 ids, else 4.
int token_bytes_for_vocab(int64_t vocab_size);

struct ShardHeader {
  int token_bytes = 2;  // 2 (uint16) or 4 (uint32)
  int64_t num_tokens = 0;
};

// Writes tokens (each in [0, 2^(8*token_bytes))) to `path`; ".zst" at the end compresses.
void write_shard(const std::string& path, const int32_t* tokens, size_t count, int token_bytes,
                 int zstd_level = 3, int zstd_workers = 0);

// One stored token (token_bytes little-endian bytes at p).
inline uint32_t decode_token(const uint8_t* p, int token_bytes) {
  return token_bytes == 2 ? uint32_t(p[0] | p[1] << 8)
                          : uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// The index of the first of `count` stored tokens that is not below vocab_size, or -1.
int64_t first_token_outside(const uint8_t* body, int64_t count, int token_bytes, int64_t vocab_size);

// Reads the shard once, in 1M-token chunks (O(tokens) time, little memory), checking the
// header, that the body holds exactly the announced tokens, and that every token is below
// vocab_size; the error names the file, the first bad token, its index and its byte offset.
ShardHeader check_shard_tokens(const std::string& path, int64_t vocab_size);

// A whole shard, checked: the body as stored (num_tokens x token_bytes, little-endian).
struct ShardData {
  ShardHeader header;
  std::vector<uint8_t> body;
  int32_t token(int64_t i) const {
    return int32_t(decode_token(body.data() + i * header.token_bytes, header.token_bytes));
  }
};
ShardData read_shard(const std::string& path);
std::vector<int32_t> read_shard_tokens(const std::string& path);

}  // namespace hla::data
