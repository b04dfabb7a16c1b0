// Batch sources over data/: the MQAR generator, the in-memory text loader and the shard loader.
#include "train/data_source.h"

#include <filesystem>
#include <sstream>

#include "data/bpe.h"
#include "data/loader.h"
#include "data/mqar.h"
#include "nn/config.h"
#include "nn/weights.h"
#include "tensor/ignore_index.h"
#include "tensor/json.h"
#include "train/checkpoint.h"
#include "train/documents.h"

namespace fs = std::filesystem;

namespace hla {

int64_t count_valid_targets(const Tensor& targets) {
  const int32_t* t = targets.data<int32_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < targets.numel(); i++) n += t[i] != kIgnoreIndex;
  return n;
}

namespace {

TrainBatch make_batch(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets,
                      int64_t B, int64_t T) {
  TrainBatch b;
  b.ids = Tensor::from_i32(inputs, {B, T});
  b.targets = Tensor::from_i32(targets, {B, T});
  b.valid = count_valid_targets(b.targets);
  return b;
}

data::MqarConfig mqar_config(const DataSettings& s) {
  data::MqarConfig c;
  c.vocab_size = s.mqar_vocab;
  c.seq_len = s.seq_len;
  c.num_kv_pairs = s.mqar_kv_pairs;
  c.power_a = s.mqar_power_a;
  c.random_non_queries = s.mqar_random_non_queries;
  c.train_seed = s.seed;
  c.val_seed = s.val_seed;
  HLA_CHECK_INPUT(c.seq_len % 2 == 0 && 4 * c.num_kv_pairs <= c.seq_len, "[data] MQAR needs an even seq_len >= 4 * mqar_kv_pairs; got seq_len ",
            c.seq_len, ", mqar_kv_pairs ", c.num_kv_pairs);
  HLA_CHECK_INPUT(c.num_kv_pairs >= 1 && c.vocab_size >= 2 * c.num_kv_pairs + 2,
            "[data] mqar_vocab ", c.vocab_size, " is too small for ", c.num_kv_pairs, " key-value pairs");
  return c;
}

class MqarSource : public BatchSource {
 public:
  MqarSource(const DataSettings& s, uint64_t seed, int64_t num_examples)
      : config_(mqar_config(s)), seed_(seed), batch_size_(s.batch_size), num_examples_(num_examples) {}

  TrainBatch next() override {
    const int64_t B = batch_size_, T = config_.seq_len;
    std::vector<int32_t> inputs, targets;
    inputs.reserve(B * T);
    targets.reserve(B * T);
    int64_t filled = 0;
    while (filled < B) {  // at most two pieces when cycling wraps around
      int64_t first = num_examples_ > 0 ? next_example_ % num_examples_ : next_example_;
      int64_t count = B - filled;
      if (num_examples_ > 0) count = std::min(count, num_examples_ - first);
      data::MqarData d = data::generate_mqar(config_, seed_, count, first);
      inputs.insert(inputs.end(), d.inputs.begin(), d.inputs.end());
      targets.insert(targets.end(), d.targets.begin(), d.targets.end());
      filled += count;
      next_example_ += count;
    }
    return make_batch(inputs, targets, B, T);
  }
  nlohmann::json position() const override { return {{"next_example", next_example_}}; }
  void set_position(const nlohmann::json& p) override {
    next_example_ = p.at("next_example").get<int64_t>();
  }

 private:
  data::MqarConfig config_;
  uint64_t seed_;
  int64_t batch_size_, num_examples_;
  int64_t next_example_ = 0;
};

// document_eos: the token that starts each document with [data] documents = "reset" (the batches
// then carry cu_seqlens), kNoDocuments with "windows".
constexpr int32_t kNoDocuments = -1;

class LoaderSource : public BatchSource {
 public:
  LoaderSource(data::TokenLoader loader, int32_t document_eos)
      : loader_(std::move(loader)), document_eos_(document_eos) {}
  TrainBatch next() override {
    data::Batch b = loader_.next_batch();
    TrainBatch batch = make_batch(b.inputs, b.targets, b.batch_size, b.seq_len);
    if (document_eos_ != kNoDocuments) batch.cu_seqlens = document_cu_seqlens(batch.ids, document_eos_);
    return batch;
  }
  nlohmann::json position() const override { return loader_.position().to_json(); }
  void set_position(const nlohmann::json& p) override {
    loader_.set_position(data::LoaderPosition::from_json(p));
  }

 private:
  data::TokenLoader loader_;
  int32_t document_eos_;
};

int32_t document_eos(const DataSettings& s, int32_t eos) { return s.documents == "reset" ? eos : kNoDocuments; }

// The start-up table's note on [data] documents.
std::string documents_note(int32_t eos) {
  return eos == kNoDocuments ? "" : "; documents reset at each EOS (id " + std::to_string(eos) + ")";
}

// vocab_size: the loader checks every token against it before the first batch.
data::LoaderOptions loader_options(const DataSettings& s, bool shuffle, int vocab_size) {
  data::LoaderOptions o;
  o.vocab_size = vocab_size;
  o.batch_size = s.batch_size;
  o.seq_len = s.seq_len;
  o.shuffle = shuffle;
  o.seed = s.seed;
  return o;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

DataSources mqar_sources(const DataSettings& s) {
  DataSources d;
  d.train = make_mqar_source(s, s.seed, s.mqar_train_examples);
  d.val = make_mqar_source(s, s.val_seed, 0);
  d.mqar = true;
  d.vocab_size = static_cast<int>(s.mqar_vocab);
  std::ostringstream os;
  os << "MQAR: V " << s.mqar_vocab << ", L " << s.seq_len << ", " << s.mqar_kv_pairs
     << " key-value pairs, power_a " << s.mqar_power_a << ", train seed " << s.seed
     << (s.mqar_train_examples > 0 ? ", " + std::to_string(s.mqar_train_examples) + " examples" : ", endless")
     << ", val seed " << s.val_seed;
  d.description = os.str();
  return d;
}

// What a run needs from a shard directory's manifest.json: the vocabulary size and the number
// of validation shards. Missing or mistyped fields are errors naming the file and the field.
struct ManifestFacts {
  int vocab_size = 0;
  int32_t eos_id = 0;
  int64_t val_shards = 0;
};

const nlohmann::json& manifest_member(const nlohmann::json& j, const char* key, const std::string& path,
                                      const std::string& field) {
  if (!j.is_object() || !j.contains(key)) fail(path, ": field '", field, "' is missing");
  return j.at(key);
}

// need_eos: [data] documents = "reset" reads tokenizer.eos_id too.
ManifestFacts read_manifest_facts(const std::string& path, bool need_eos) {
  const nlohmann::json manifest = read_json_file(path);
  ManifestFacts facts;
  if (!manifest.is_object()) fail(path, ": a manifest must be a JSON object, got ", json_excerpt(manifest));
  const nlohmann::json& tokenizer = manifest_member(manifest, "tokenizer", path, "tokenizer");
  read_setting(manifest_member(tokenizer, "vocab_size", path, "tokenizer.vocab_size"), facts.vocab_size, path,
               "tokenizer.vocab_size");
  if (facts.vocab_size < 1) fail(path, ": tokenizer.vocab_size must be >= 1, got ", facts.vocab_size);
  if (need_eos)
    read_setting(manifest_member(tokenizer, "eos_id", path, "tokenizer.eos_id"), facts.eos_id, path,
                 "tokenizer.eos_id");
  const nlohmann::json splits = manifest.value("splits", nlohmann::json::object());
  if (!splits.is_object()) fail(path, ": field 'splits' must be an object, got ", json_excerpt(splits));
  if (splits.contains("val")) {
    const nlohmann::json& val = splits.at("val");
    if (!val.is_object()) fail(path, ": field 'splits.val' must be an object, got ", json_excerpt(val));
    if (val.contains("shards")) read_setting(val.at("shards"), facts.val_shards, path, "splits.val.shards");
  }
  return facts;
}

DataSources shard_sources(const DataSettings& s) {
  DataSources d;
  std::string manifest = (fs::path(s.source) / "manifest.json").string();
  bool directory = fs::is_directory(s.source);
  ManifestFacts facts;
  if (directory) facts = read_manifest_facts(manifest, s.documents == "reset");
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (!directory) tokenizer = data::load_tokenizer(s.tokenizer);
  const int vocab = directory ? facts.vocab_size : tokenizer->vocab_size();
  const int32_t eos = document_eos(s, directory ? facts.eos_id : tokenizer->eos_id());
  d.train = std::make_unique<LoaderSource>(
      data::TokenLoader(data::find_shards(s.source, "train"), loader_options(s, true, vocab)), eos);
  std::string val_note = "no validation split";
  if (facts.val_shards > 0) {
    data::TokenLoader val(data::find_shards(s.source, "val"), loader_options(s, false, vocab));
    val_note = std::to_string(val.total_tokens()) + " val tokens";
    d.val = std::make_unique<LoaderSource>(std::move(val), eos);
  }
  d.vocab_size = vocab;
  d.description =
      "token shards " + s.source + " (vocab " + std::to_string(vocab) + ", " + val_note + ")" + documents_note(eos);
  return d;
}

DataSources text_sources(const DataSettings& s) {
  DataSources d;
  auto tokenizer = data::load_tokenizer(s.tokenizer);
  data::CorpusOptions corpus;
  corpus.jsonl_field = s.jsonl_field;
  std::vector<std::string> files = data::expand_corpus_inputs(split_commas(s.source));
  std::vector<int32_t> tokens = data::tokenize_corpus(files, *tokenizer, corpus);
  auto val_tokens = static_cast<int64_t>(double(tokens.size()) * s.val_fraction);
  std::vector<int32_t> val(tokens.end() - val_tokens, tokens.end());
  tokens.resize(tokens.size() - val_tokens);
  const int vocab = tokenizer->vocab_size();
  const int32_t eos = document_eos(s, tokenizer->eos_id());
  d.train =
      std::make_unique<LoaderSource>(data::TokenLoader(tokens, loader_options(s, true, vocab), s.source), eos);
  if (val_tokens > 0)
    d.val = std::make_unique<LoaderSource>(
        data::TokenLoader(val, loader_options(s, false, vocab), s.source + " (val)"), eos);
  d.vocab_size = vocab;
  d.description = "text " + s.source + ": " + std::to_string(tokens.size()) + " train + " +
                  std::to_string(val_tokens) + " val tokens, tokenizer " + tokenizer->name() +
                  " (vocab " + std::to_string(d.vocab_size) + ")" + documents_note(eos);
  return d;
}

}  // namespace

std::unique_ptr<BatchSource> make_mqar_source(const DataSettings& settings, uint64_t seed,
                                              int64_t num_examples) {
  return std::make_unique<MqarSource>(settings, seed, num_examples);
}

DataSources make_data_sources(const DataSettings& s) {
  if (s.source == "mqar") return mqar_sources(s);
  bool shards = (fs::is_directory(s.source) && fs::exists(fs::path(s.source) / "manifest.json")) ||
                ends_with(s.source, ".bin") || ends_with(s.source, ".bin.zst");
  return shards ? shard_sources(s) : text_sources(s);
}

}  // namespace hla
