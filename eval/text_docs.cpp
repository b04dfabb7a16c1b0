// Reads .txt / .jsonl / .jsonl.zst documents (see text_docs.h).
#include "eval/text_docs.h"

#include <zstd.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tensor/error.h"

namespace hla::eval {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open file");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string zstd_decompress(const std::string& compressed, const std::string& path) {
  ZSTD_DCtx* ctx = ZSTD_createDCtx();
  std::string out;
  std::vector<char> buffer(ZSTD_DStreamOutSize());
  ZSTD_inBuffer in{compressed.data(), compressed.size(), 0};
  size_t last = 0;
  while (in.pos < in.size) {
    ZSTD_outBuffer chunk{buffer.data(), buffer.size(), 0};
    last = ZSTD_decompressStream(ctx, &chunk, &in);
    if (ZSTD_isError(last)) {
      std::string why = ZSTD_getErrorName(last);
      ZSTD_freeDCtx(ctx);
      fail(path, ": zstd decompression failed: ", why);
    }
    out.append(buffer.data(), chunk.pos);
  }
  ZSTD_freeDCtx(ctx);
  if (last != 0) fail(path, ": zstd stream is truncated");
  return out;
}

}  // namespace

std::vector<std::string> read_text_documents(const std::string& path, int64_t max_documents) {
  std::string content = read_file(path);
  std::string name = path;
  if (ends_with(name, ".zst")) {
    content = zstd_decompress(content, path);
    name.resize(name.size() - 4);
  }
  if (ends_with(name, ".txt")) return {content};
  if (!ends_with(name, ".jsonl"))
    fail(path, ": unknown text format (expected .txt, .jsonl or .jsonl.zst)");
  std::vector<std::string> docs;
  std::istringstream lines(content);
  std::string line;
  for (int64_t line_no = 1; std::getline(lines, line); line_no++) {
    if (max_documents >= 0 && static_cast<int64_t>(docs.size()) >= max_documents) break;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(path, ":", line_no, ": not valid JSON (", e.what(), ")");
    }
    if (!record.is_object() || !record.contains("text") || !record["text"].is_string())
      fail(path, ":", line_no, ": a record needs a string field \"text\"");
    docs.push_back(record["text"].get<std::string>());
  }
  return docs;
}

}  // namespace hla::eval
