// `hla data`: prepare token shards, train a BPE tokenizer, benchmark the data pipeline.
//
//   hla data prepare --input CORPUS... --tokenizer byte|tok.json --out DIR [--val-fraction f]
//   hla data train-tokenizer --input CORPUS... --vocab-size 8192 --out tok.json
//   hla data bench --input CORPUS... [--tokenizer byte|tok.json]
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <unistd.h>

#include "cli/command.h"
#include "data/bpe_train.h"
#include "data/corpus.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "tensor/error.h"

namespace {

using namespace hla::data;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int all_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// Corpus flags shared by the three commands.
struct CorpusFlags {
  std::vector<std::string> inputs;
  std::string jsonl_field = "text";
  std::string txt_split = "file";

  void add(CLI::App& app) {
    app.add_option("--input", inputs, "corpus files, globs or directories (.txt, .jsonl, optionally .zst)")
        ->required();
    app.add_option("--jsonl-field", jsonl_field, "JSON field holding the document text");
    app.add_option("--txt-split", txt_split, "a .txt document is the whole file or each blank-line block")
        ->check(CLI::IsMember({"file", "blank-line"}));
  }
  CorpusOptions options() const {
    return {jsonl_field, txt_split == "file" ? TxtSplit::File : TxtSplit::BlankLine};
  }
};

// Documents of the corpus until max_bytes of text (0 = all).
std::vector<std::string> read_documents(const CorpusFlags& flags, double max_mb) {
  CorpusReader reader(expand_corpus_inputs(flags.inputs), flags.options());
  std::vector<std::string> docs;
  uint64_t bytes = 0, limit = static_cast<uint64_t>(max_mb * 1e6);
  std::string doc;
  while ((limit == 0 || bytes < limit) && reader.next(doc)) {
    bytes += doc.size();
    docs.push_back(std::move(doc));
  }
  return docs;
}

uint64_t text_bytes(const std::vector<std::string>& docs) {
  uint64_t n = 0;
  for (const auto& d : docs) n += d.size();
  return n;
}

void setup_prepare(CLI::App& data) {
  auto* cmd = data.add_subcommand("prepare", "Tokenise a corpus into llm.c-style .bin(.zst) shards + manifest.json");
  auto corpus = std::make_shared<CorpusFlags>();
  auto o = std::make_shared<PrepareOptions>();
  auto tokenizer = std::make_shared<std::string>("byte");
  auto quiet = std::make_shared<bool>(false);
  corpus->add(*cmd);
  cmd->add_option("--val-input", o->val_inputs, "corpus files whose documents all go to the val split");
  cmd->add_option("--tokenizer", *tokenizer, "byte, or a Hugging Face tokenizer.json");
  cmd->add_option("--out", o->out_dir, "output directory (must not hold a manifest.json yet)")->required();
  cmd->add_option("--val-fraction", o->val_fraction, "fraction of --input documents sent to val (by seeded hash)");
  cmd->add_option("--seed", o->seed, "seed of the val split");
  cmd->add_option("--threads", o->threads, "tokeniser threads, 0 = all cores");
  cmd->add_flag("--zstd", o->zstd, "write .bin.zst shards");
  cmd->add_option("--zstd-level", o->zstd_level, "zstd compression level");
  cmd->add_option("--shard-tokens", o->shard_tokens, "tokens per shard");
  cmd->add_flag("--quiet", *quiet, "no progress bar");
  cmd->callback([=] {
    o->inputs = corpus->inputs;
    o->corpus = corpus->options();
    o->progress = !*quiet;
    auto tok = load_tokenizer(*tokenizer);
    PrepareStats s = prepare_shards(*o, *tok);
    std::printf("prepared %s: %lld train tokens (%lld docs), %lld val tokens (%lld docs), %zu shards, "
                "%.1f MB text in %.1f s (%.1f MB/s), tokenizer %s [%s]\n",
                o->out_dir.c_str(), (long long)s.train_tokens, (long long)s.train_docs,
                (long long)s.val_tokens, (long long)s.val_docs, s.manifest["shards"].size(),
                s.text_bytes / 1e6, s.seconds, s.text_bytes / 1e6 / s.seconds, tok->name().c_str(),
                tok->hash().c_str());
  });
}

void setup_train_tokenizer(CLI::App& data) {
  auto* cmd = data.add_subcommand("train-tokenizer", "Train a byte-level BPE tokenizer, saved as tokenizer.json");
  auto corpus = std::make_shared<CorpusFlags>();
  auto o = std::make_shared<BpeTrainOptions>();
  auto out = std::make_shared<std::string>();
  auto max_mb = std::make_shared<double>(0);
  corpus->add(*cmd);
  cmd->add_option("--vocab-size", o->vocab_size, "vocabulary size, bytes and special tokens included");
  cmd->add_option("--out", *out, "output tokenizer.json")->required();
  cmd->add_option("--max-mb", *max_mb, "train on the first documents up to this many MB of text (0 = all)");
  cmd->add_option("--min-frequency", o->min_frequency, "stop when the best pair occurs fewer times");
  cmd->add_option("--special", o->special_tokens, "special tokens; the first is eos, the second pad");
  cmd->callback([=] {
    auto t0 = Clock::now();
    std::vector<std::string> docs = read_documents(*corpus, *max_mb);
    auto tok = train_bpe(docs, *o, "bpe:" + *out);
    save_tokenizer_json(*tok, *out);
    std::printf("trained %s: vocab %d (%zu merges) on %zu docs, %.1f MB, in %.1f s; hash %s\n",
                out->c_str(), tok->vocab_size(), tok->model().merges.size(), docs.size(),
                text_bytes(docs) / 1e6, seconds_since(t0), tok->hash().c_str());
  });
}

// One row of the bench table: MB/s at threads = 1 and threads = all (negative: not measured).
struct BenchRow {
  std::string stage;
  double one, all;
};

template <class F>
double mb_per_s(double megabytes, F&& work) {
  auto t0 = Clock::now();
  work();
  return megabytes / seconds_since(t0);
}

std::vector<BenchRow> run_bench(const CorpusFlags& corpus, const std::string& tokenizer_spec,
                                double max_mb, const fs::path& tmp, int threads) {
  std::vector<std::string> docs;
  double read_rate = 0;
  {
    auto t0 = Clock::now();
    docs = read_documents(corpus, max_mb);
    read_rate = text_bytes(docs) / 1e6 / seconds_since(t0);
  }
  const double text_mb = text_bytes(docs) / 1e6;
  std::vector<int32_t> tokens;
  auto tokenize_rate = [&](int n) {
    auto tok = load_tokenizer(tokenizer_spec);  // fresh: no warm piece cache
    std::vector<std::vector<int32_t>> encoded;
    double rate = mb_per_s(text_mb, [&] { encoded = encode_documents(*tok, docs, n); });
    tokens.clear();
    for (const auto& d : encoded) tokens.push_back(tok->eos_id()), tokens.insert(tokens.end(), d.begin(), d.end());
    return rate;
  };
  BenchRow tokenize{"tokenize (text MB/s)", tokenize_rate(1), tokenize_rate(threads)};
  int token_bytes = token_bytes_for_vocab(load_tokenizer(tokenizer_spec)->vocab_size());
  double shard_mb = (kShardHeaderBytes + tokens.size() * token_bytes) / 1e6;
  auto write_rate = [&](const char* name, int workers) {
    std::string path = (tmp / name).string();
    return mb_per_s(shard_mb, [&] { write_shard(path, tokens.data(), tokens.size(), token_bytes, 3, workers); });
  };
  BenchRow write_bin{"write .bin (shard MB/s)", write_rate("a.bin", 0), -1};
  BenchRow write_zst{"write .bin.zst level 3 (shard MB/s)", write_rate("a.bin.zst", 0), write_rate("b.bin.zst", threads)};
  auto prepare_rate = [&](int n) {
    PrepareOptions o;
    o.inputs = corpus.inputs;
    o.corpus = corpus.options();
    o.out_dir = (tmp / ("prepare" + std::to_string(n))).string();
    o.threads = n;
    o.progress = false;
    auto tok = load_tokenizer(tokenizer_spec);
    PrepareStats s = prepare_shards(o, *tok);
    return s.text_bytes / 1e6 / s.seconds;
  };
  BenchRow prepare{"prepare, whole corpus (text MB/s)", prepare_rate(1), prepare_rate(threads)};
  std::printf("corpus: %zu docs, %.1f MB text, %zu tokens (%.2f bytes/token)\n", docs.size(), text_mb,
              tokens.size(), text_mb * 1e6 / tokens.size());
  return {{"read + decompress + parse (text MB/s)", read_rate, -1}, tokenize, write_bin, write_zst, prepare};
}

void setup_bench(CLI::App& data) {
  auto* cmd = data.add_subcommand("bench", "MB/s of reading, tokenising and shard writing, 1 thread vs all cores");
  auto corpus = std::make_shared<CorpusFlags>();
  auto tokenizer = std::make_shared<std::string>("byte");
  auto max_mb = std::make_shared<double>(0);
  auto threads = std::make_shared<int>(all_cores());
  corpus->add(*cmd);
  cmd->add_option("--tokenizer", *tokenizer, "byte, or a Hugging Face tokenizer.json");
  cmd->add_option("--max-mb", *max_mb, "use the first documents up to this many MB of text (0 = all)");
  cmd->add_option("--threads", *threads, "the 'all cores' thread count");
  cmd->callback([=] {
    fs::path tmp = fs::temp_directory_path() / ("hla-data-bench-" + std::to_string(getpid()));
    fs::create_directories(tmp);
    double load[1] = {0};
    getloadavg(load, 1);  // before the bench: the load of other processes
    std::vector<BenchRow> rows;
    try {
      rows = run_bench(*corpus, *tokenizer, *max_mb, tmp, *threads);
    } catch (...) {
      fs::remove_all(tmp);
      throw;
    }
    fs::remove_all(tmp);
    std::printf("tokenizer: %s; load average %.1f on %d cores (wall-clock rates fall when others share them)\n",
                tokenizer->c_str(), load[0], all_cores());
    std::printf("\n%-40s %12s %12s\n", "stage", "threads=1",
                ("threads=" + std::to_string(*threads)).c_str());
    auto cell = [](double v) {
      if (v < 0) return std::string("-");
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", v);
      return std::string(buf);
    };
    for (const auto& r : rows) {
      std::printf("%-40s %12s %12s\n", r.stage.c_str(), cell(r.one).c_str(), cell(r.all).c_str());
    }
  });
}

const bool registered = hla::cli::register_command(
    "data", "Data pipeline: prepare shards, train a tokenizer, bench", [](CLI::App& sub) {
      sub.require_subcommand(1);
      setup_prepare(sub);
      setup_train_tokenizer(sub);
      setup_bench(sub);
    });

}  // namespace
