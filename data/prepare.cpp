// The prepare pipeline: read a batch of documents (one thread), tokenise it (all threads),
// append it to the split's shard writer (one thread), repeat; then write the manifest.
#include "data/prepare.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "data/shard.h"
#include "tensor/atomic_file.h"
#include "tensor/error.h"
#include "tensor/random.h"

namespace hla::data {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr size_t kBatchTextBytes = 8 << 20;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One split's token stream, cut into shards as it grows.
class ShardStream {
 public:
  ShardStream(std::string split, const PrepareOptions& options, int32_t vocab_size)
      : split_(std::move(split)), options_(options), vocab_size_(vocab_size),
        token_bytes_(token_bytes_for_vocab(vocab_size)) {}

  void append(int32_t eos, const std::vector<int32_t>& doc) {
    pending_.push_back(eos);
    pending_.insert(pending_.end(), doc.begin(), doc.end());
    documents_++;
    while (static_cast<int64_t>(pending_.size()) >= options_.shard_tokens) flush(options_.shard_tokens);
  }
  void finish() {
    if (!pending_.empty()) flush(pending_.size());
  }
  int64_t tokens() const { return tokens_ + static_cast<int64_t>(pending_.size()); }
  int64_t documents() const { return documents_; }
  const nlohmann::ordered_json& shards() const { return shards_; }

 private:
  void flush(size_t count) {
    char name[64];
    std::snprintf(name, sizeof name, "%s_%06zu.bin%s", split_.c_str(), shards_.size(),
                  options_.zstd ? ".zst" : "");
    std::string path = (fs::path(options_.out_dir) / name).string();
    write_shard(path, pending_.data(), count, token_bytes_, options_.zstd_level);
    check_shard_tokens(path, vocab_size_);  // read back what was written, as a run will read it
    shards_.push_back({{"name", name}, {"split", split_}, {"tokens", count},
                       {"bytes", fs::file_size(path)}});
    tokens_ += static_cast<int64_t>(count);
    pending_.erase(pending_.begin(), pending_.begin() + count);
  }

  std::string split_;
  const PrepareOptions& options_;
  int32_t vocab_size_;
  int token_bytes_;
  std::vector<int32_t> pending_;
  int64_t tokens_ = 0, documents_ = 0;
  nlohmann::ordered_json shards_ = nlohmann::ordered_json::array();
};

class Progress {
 public:
  Progress(bool enabled, uint64_t total_file_bytes)
      : enabled_(enabled), tty_(isatty(2)), total_(total_file_bytes), start_(Clock::now()) {}

  void update(uint64_t file_bytes, uint64_t text_bytes, int64_t tokens, bool final = false) {
    if (!enabled_) return;
    double elapsed = seconds_since(start_);
    if (!final && !tty_ && elapsed - last_print_ < 10) return;
    last_print_ = elapsed;
    double fraction = total_ ? std::min(1.0, double(file_bytes) / total_) : 1.0;
    const int width = 30;
    int filled = static_cast<int>(fraction * width);
    std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
    std::fprintf(stderr, "%sprepare [%s] %3.0f%%  %8.1f MB text  %6.1f MB/s  %8.2f M tokens  %5.1f s%s",
                 tty_ ? "\r" : "", bar.c_str(), fraction * 100, text_bytes / 1e6,
                 text_bytes / 1e6 / std::max(elapsed, 1e-9), tokens / 1e6, elapsed,
                 tty_ && !final ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  bool enabled_, tty_;
  uint64_t total_;
  Clock::time_point start_;
  double last_print_ = -1e9;
};

struct Source {
  std::string path;
  bool all_val;
  int64_t documents = 0;
  uint64_t text_bytes = 0;
};

nlohmann::ordered_json make_manifest(const PrepareOptions& o, const Tokenizer& tok, int token_bytes,
                             const ShardStream& train, const ShardStream& val,
                             const std::vector<Source>& sources) {
  nlohmann::ordered_json shards = train.shards();
  for (const auto& s : val.shards()) shards.push_back(s);
  nlohmann::ordered_json source_list = nlohmann::ordered_json::array();
  for (const auto& s : sources) {
    const char* split = s.all_val ? "val" : o.val_fraction > 0 ? "train+val" : "train";
    source_list.push_back({{"path", s.path}, {"bytes", fs::file_size(s.path)}, {"documents", s.documents},
                           {"text_bytes", s.text_bytes}, {"split", split}});
  }
  return {
      {"format", "hla-token-shards"},
      {"version", 1},
      {"tokenizer", {{"name", tok.name()}, {"hash", tok.hash()}, {"vocab_size", tok.vocab_size()},
                     {"eos_id", tok.eos_id()}, {"pad_id", tok.pad_id()}}},
      {"token_dtype", token_bytes == 2 ? "uint16" : "uint32"},
      {"header", {{"magic", token_bytes == 2 ? kShardMagicU16 : kShardMagicU32},
                  {"version", token_bytes == 2 ? kShardVersionU16 : kShardVersionU32},
                  {"ints", kShardHeaderInts}}},
      {"compression", o.zstd ? "zstd" : "none"},
      {"document_separator", "eos before every document"},
      {"splits", {{"train", {{"tokens", train.tokens()}, {"documents", train.documents()},
                             {"shards", train.shards().size()}}},
                  {"val", {{"tokens", val.tokens()}, {"documents", val.documents()},
                           {"shards", val.shards().size()}}}}},
      {"shards", shards},
      {"sources", source_list},
      {"options", {{"val_fraction", o.val_fraction}, {"seed", o.seed}, {"shard_tokens", o.shard_tokens},
                   {"jsonl_field", o.corpus.jsonl_field},
                   {"txt_split", o.corpus.txt_split == TxtSplit::File ? "file" : "blank-line"}}},
  };
}

}  // namespace

PrepareStats prepare_shards(const PrepareOptions& o, const Tokenizer& tokenizer) {
  HLA_CHECK(!o.out_dir.empty(), "prepare: no output directory (--out)");
  HLA_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "prepare: --val-fraction must be in [0, 1), got ",
            o.val_fraction);
  HLA_CHECK(o.shard_tokens > 0, "prepare: --shard-tokens must be positive, got ", o.shard_tokens);
  fs::create_directories(o.out_dir);
  std::string manifest_path = (fs::path(o.out_dir) / "manifest.json").string();
  if (fs::exists(manifest_path)) {
    fail("prepare: ", o.out_dir, " already holds a prepared data set (manifest.json); choose another --out or delete it");
  }

  std::vector<Source> sources;
  for (const auto& f : expand_corpus_inputs(o.inputs)) sources.push_back({f, false});
  if (!o.val_inputs.empty()) {
    for (const auto& f : expand_corpus_inputs(o.val_inputs)) sources.push_back({f, true});
  }
  std::vector<std::string> files;
  for (const auto& s : sources) files.push_back(s.path);

  const int token_bytes = token_bytes_for_vocab(tokenizer.vocab_size());
  ShardStream train("train", o, tokenizer.vocab_size()), val("val", o, tokenizer.vocab_size());
  CorpusReader reader(files, o.corpus);
  Progress progress(o.progress, total_file_bytes(files));
  PrepareStats stats;
  auto start = Clock::now();
  uint64_t doc_index = 0;
  std::vector<std::string> docs;
  std::vector<size_t> doc_source;
  for (bool more = true; more;) {
    docs.clear();
    doc_source.clear();
    size_t batch_bytes = 0;
    std::string doc;
    while (batch_bytes < kBatchTextBytes && (more = reader.next(doc))) {
      batch_bytes += doc.size();
      doc_source.push_back(reader.file_index());
      docs.push_back(std::move(doc));
    }
    std::vector<std::vector<int32_t>> encoded = encode_documents(tokenizer, docs, o.threads);
    for (size_t i = 0; i < docs.size(); i++, doc_index++) {
      Source& src = sources[doc_source[i]];
      src.documents++;
      src.text_bytes += docs[i].size();
      bool to_val = src.all_val || counter_uniform(o.seed, doc_index) < o.val_fraction;
      (to_val ? val : train).append(tokenizer.eos_id(), encoded[i]);
    }
    stats.text_bytes += batch_bytes;
    progress.update(reader.file_bytes_read(), stats.text_bytes, train.tokens() + val.tokens());
  }
  train.finish();
  val.finish();
  stats.manifest = make_manifest(o, tokenizer, token_bytes, train, val, sources);
  write_file_atomic(manifest_path, stats.manifest.dump(2) + "\n");
  stats.seconds = seconds_since(start);
  stats.train_tokens = train.tokens(), stats.val_tokens = val.tokens();
  stats.train_docs = train.documents(), stats.val_docs = val.documents();
  progress.update(reader.file_bytes_read(), stats.text_bytes, stats.train_tokens + stats.val_tokens, true);
  return stats;
}

}  // namespace hla::data
