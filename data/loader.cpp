// TokenLoader: epoch / shard / window bookkeeping and the helpers that feed it.
#include "data/loader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "tensor/error.h"
#include "tensor/json.h"
#include "tensor/random.h"

namespace hla::data {

namespace {

// A generator for one (seed, epoch, shard) triple; kind separates independent uses.
Rng stream_rng(uint64_t seed, uint64_t kind, uint64_t epoch, uint64_t shard) {
  return Rng(splitmix64(splitmix64(splitmix64(seed ^ kind) ^ epoch) ^ shard));
}

void shuffle_in_place(std::vector<int64_t>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; i--) std::swap(v[i - 1], v[rng.below(i)]);
}

std::shared_ptr<const ShardData> in_memory_shard(const std::vector<int32_t>& tokens) {
  auto data = std::make_shared<ShardData>();
  data->header = {4, static_cast<int64_t>(tokens.size())};
  data->body.resize(tokens.size() * 4);
  for (size_t i = 0; i < tokens.size(); i++) {
    uint32_t t = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; b++) data->body[i * 4 + b] = uint8_t(t >> (8 * b));
  }
  return data;
}

// The shards of `split` that spec/manifest.json lists, each entry checked.
std::vector<std::string> manifest_shards(const std::string& dir, const std::string& split) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "manifest.json").string();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("shard directory ", dir, " has no manifest.json (write it with `hla data prepare`)");
  const nlohmann::json manifest = parse_json(std::string(std::istreambuf_iterator<char>(in), {}), path);
  if (!manifest.is_object() || !manifest.contains("shards") || !manifest["shards"].is_array())
    fail(path, ": not a JSON object with a \"shards\" list");
  auto has_string = [](const nlohmann::json& entry, const char* key) {
    return entry.contains(key) && entry[key].is_string() && !entry[key].get<std::string>().empty();
  };
  std::vector<std::string> shards;
  for (size_t i = 0; i < manifest["shards"].size(); i++) {
    const nlohmann::json& entry = manifest["shards"][i];
    if (!entry.is_object() || !has_string(entry, "name") || !has_string(entry, "split"))
      fail(path, ": shards[", i, "] needs a string \"name\" and \"split\": ", json_excerpt(entry));
    if (entry["split"] == split) shards.push_back((fs::path(dir) / entry["name"].get<std::string>()).string());
  }
  if (shards.empty()) fail(path, " lists no shards of split '", split, "'");
  return shards;
}

constexpr uint64_t kShardOrderStream = 0x5348415244ull, kWindowStream = 0x57494E444Full;

}  // namespace

nlohmann::json LoaderPosition::to_json() const {
  return {{"epoch", epoch}, {"shard", shard}, {"window", window}, {"batches", batches},
          {"seed", seed}, {"data_tokens", data_tokens}};
}

LoaderPosition LoaderPosition::from_json(const nlohmann::json& j) {
  LoaderPosition p;
  try {
    p.epoch = j.at("epoch"), p.shard = j.at("shard"), p.window = j.at("window");
    p.batches = j.at("batches"), p.seed = j.at("seed"), p.data_tokens = j.at("data_tokens");
  } catch (const nlohmann::json::exception& e) {
    fail("loader position ", json_excerpt(j), ": ", e.what());
  }
  return p;
}

TokenLoader::TokenLoader(const std::vector<std::string>& shard_paths, LoaderOptions options)
    : options_(options) {
  HLA_CHECK(!shard_paths.empty(), "token loader: no shards given");
  check_vocab_size_given();
  for (const auto& path : shard_paths) {
    sources_.push_back({path, check_shard_tokens(path, options_.vocab_size), nullptr});
    total_tokens_ += sources_.back().header.num_tokens;
  }
  count_windows();
  enter_shard();
}

TokenLoader::TokenLoader(const std::vector<int32_t>& tokens, LoaderOptions options, std::string name)
    : options_(options) {
  auto data = in_memory_shard(tokens);
  sources_.push_back({"", data->header, data});
  total_tokens_ = data->header.num_tokens;
  if (name.empty()) name = "in-memory tokens";
  check_vocab_size_given();
  const int64_t bad = first_token_outside(data->body.data(), total_tokens_, 4, options_.vocab_size);
  if (bad >= 0) {
    fail(name, ": token ", tokens[bad], " at index ", bad, " is outside the vocabulary of ", options_.vocab_size,
         " tokens");
  }
  try {
    count_windows();
  } catch (const Error& e) {
    fail(name, ": ", e.what());
  }
  enter_shard();
}

void TokenLoader::check_vocab_size_given() const {
  if (options_.vocab_size <= 0)
    fail("token loader: vocabulary size ", options_.vocab_size, ": the tokens cannot be checked");
}

void TokenLoader::count_windows() {
  HLA_CHECK(options_.batch_size > 0 && options_.seq_len > 0, "token loader: batch size ",
            options_.batch_size, " and sequence length ", options_.seq_len, " must be positive");
  int64_t windows = 0;
  for (const auto& s : sources_) windows += windows_in(s);
  if (windows == 0) {
    fail("token loader: ", total_tokens_, " tokens in ", sources_.size(),
         " shard(s) give no window: a shard needs at least seq_len + 1 = ", options_.seq_len + 1,
         " tokens");
  }
  windows_per_epoch_ = windows;
}

int64_t TokenLoader::windows_in(const Source& s) const {
  return s.header.num_tokens < 1 ? 0 : (s.header.num_tokens - 1) / options_.seq_len;
}

size_t TokenLoader::shard_at(uint64_t epoch, uint64_t order_index) const {
  if (!options_.shuffle) return order_index;
  std::vector<int64_t> order(sources_.size());
  std::iota(order.begin(), order.end(), 0);
  Rng rng = stream_rng(options_.seed, kShardOrderStream, epoch, 0);
  shuffle_in_place(order, rng);
  return static_cast<size_t>(order[order_index]);
}

void TokenLoader::enter_shard() {
  size_t index = shard_at(position_.epoch, position_.shard);
  const Source& s = sources_[index];
  if (index != current_source_ || !current_data_) {
    current_data_ = s.resident ? s.resident : std::make_shared<const ShardData>(read_shard(s.path));
    HLA_CHECK(current_data_->header.num_tokens == s.header.num_tokens, "shard ", s.path,
              " changed while in use: ", s.header.num_tokens, " tokens at start, now ",
              current_data_->header.num_tokens);
    current_source_ = index;
  }
  const int64_t T = options_.seq_len, n = windows_in(s);
  window_order_.resize(n);
  std::iota(window_order_.begin(), window_order_.end(), 0);
  int64_t offset = 0;
  if (options_.shuffle && n > 0) {
    Rng rng = stream_rng(options_.seed, kWindowStream, position_.epoch, index);
    offset = static_cast<int64_t>(rng.below((s.header.num_tokens - 1) % T + 1));
    shuffle_in_place(window_order_, rng);
  }
  for (auto& w : window_order_) w = offset + w * T;
}

Batch TokenLoader::next_batch() {
  const int64_t B = options_.batch_size, T = options_.seq_len;
  Batch batch{B, T, std::vector<int32_t>(B * T), std::vector<int32_t>(B * T)};
  for (int64_t b = 0; b < B; b++) {
    while (position_.window >= window_order_.size()) {
      position_.window = 0;
      if (++position_.shard == sources_.size()) position_.shard = 0, position_.epoch++;
      enter_shard();
    }
    int64_t start = window_order_[position_.window++];
    for (int64_t t = 0; t < T; t++) {
      batch.inputs[b * T + t] = current_data_->token(start + t);
      batch.targets[b * T + t] = current_data_->token(start + t + 1);
    }
  }
  position_.batches++;
  return batch;
}

LoaderPosition TokenLoader::position() const {
  LoaderPosition p = position_;
  p.seed = options_.seed;
  p.data_tokens = total_tokens_;
  return p;
}

void TokenLoader::set_position(const LoaderPosition& p) {
  if (p.seed != options_.seed || p.data_tokens != total_tokens_) {
    fail("loader position was saved with seed ", p.seed, " on ", p.data_tokens,
         " tokens; this loader has seed ", options_.seed, " and ", total_tokens_,
         " tokens (resume with the same data and seed)");
  }
  HLA_CHECK(p.shard < sources_.size(), "loader position: shard ", p.shard, " but only ",
            sources_.size(), " shards");
  position_ = p;
  enter_shard();
  HLA_CHECK(p.window <= window_order_.size(), "loader position: window ", p.window, " but shard has ",
            window_order_.size(), " windows");
}

std::vector<int32_t> tokenize_corpus(const std::vector<std::string>& files,
                                     const Tokenizer& tokenizer, const CorpusOptions& options,
                                     int threads) {
  std::vector<std::string> docs = read_corpus(files, options);
  std::vector<std::vector<int32_t>> encoded = encode_documents(tokenizer, docs, threads);
  std::vector<int32_t> tokens;
  for (const auto& doc : encoded) {
    tokens.push_back(tokenizer.eos_id());
    tokens.insert(tokens.end(), doc.begin(), doc.end());
  }
  return tokens;
}

TokenLoader make_text_loader(const std::vector<std::string>& corpus_inputs,
                             const Tokenizer& tokenizer, LoaderOptions options,
                             const CorpusOptions& corpus, int threads) {
  std::vector<std::string> files = expand_corpus_inputs(corpus_inputs);
  std::string name = files.size() == 1 ? files[0] : std::to_string(files.size()) + " corpus files";
  return TokenLoader(tokenize_corpus(files, tokenizer, corpus, threads), options, name);
}

std::vector<std::string> find_shards(const std::string& spec, const std::string& split) {
  namespace fs = std::filesystem;
  if (fs::is_directory(spec)) return manifest_shards(spec, split);
  if (fs::exists(spec)) return {spec};
  std::vector<std::string> matches = glob_paths(spec);
  if (matches.empty()) fail("no shard matches ", spec);
  return matches;
}

}  // namespace hla::data
