// BPE training with incremental pair counts.
//
// pass 1: pre-tokenise every document and count the distinct pieces ("words"), sorted so that
//         the order (and with it every later tie) does not depend on hashing.
// pass 2: count every adjacent symbol pair over all words (times the word's count) and index
//         which words hold each pair.
// pass 3: repeatedly take the best pair from a max-heap with lazy deletion (an entry whose count
//         is stale is re-pushed with the current count), rewrite only the words that hold it,
//         and update the counts of the pairs those words lose and gain.
#include "data/bpe_train.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "data/pretokenize.h"
#include "tensor/error.h"

namespace hla::data {

namespace {

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
}

std::vector<Word> count_words(const std::vector<std::string>& docs) {
  std::unordered_map<std::string_view, int64_t> counts;
  std::vector<std::string_view> pieces;
  for (const auto& doc : docs) {
    pieces.clear();
    split_gpt2(doc, pieces);
    for (auto p : pieces) counts[p]++;
  }
  std::vector<std::pair<std::string_view, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [text, count] : sorted) {
    Word w{{}, count};
    for (unsigned char b : text) w.symbols.push_back(b);
    words.push_back(std::move(w));
  }
  return words;
}

class PairTable {
 public:
  struct Best {
    int64_t count;
    uint64_t key;
  };

  explicit PairTable(const std::vector<Word>& words) {
    for (size_t w = 0; w < words.size(); w++) add_word(words[w], static_cast<int32_t>(w), +1);
    for (const auto& [key, count] : counts_) heap_.push({count, key});
  }

  // The pair with the highest count (smallest key on ties); count 0 when none is left.
  Best pop_best() {
    while (!heap_.empty()) {
      Best top = heap_.top();
      heap_.pop();
      auto it = counts_.find(top.key);
      int64_t current = it == counts_.end() ? 0 : it->second;
      if (current == top.count) return top;
      if (current > 0) heap_.push({current, top.key});
    }
    return {0, 0};
  }

  // Words that held the pair at some point (possibly no longer; callers check).
  std::vector<int32_t> take_holders(uint64_t key) {
    auto it = holders_.find(key);
    if (it == holders_.end()) return {};
    std::vector<int32_t> out = std::move(it->second);
    holders_.erase(it);
    return out;
  }

  // Adds (sign +1) or removes (-1) the pairs of one word; pairs whose count grows are pushed.
  void add_word(const Word& word, int32_t index, int sign) {
    for (size_t i = 0; i + 1 < word.symbols.size(); i++) {
      uint64_t key = pair_key(word.symbols[i], word.symbols[i + 1]);
      int64_t& count = counts_[key];
      count += sign * word.count;
      if (sign > 0) {
        auto& h = holders_[key];
        if (h.empty() || h.back() != index) h.push_back(index);
        touched_.push_back(key);
      } else if (count == 0) {
        counts_.erase(key);
      }
    }
  }

  void push_touched() {
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (uint64_t key : touched_) {
      auto it = counts_.find(key);
      if (it != counts_.end()) heap_.push({it->second, key});
    }
    touched_.clear();
  }

 private:
  struct Order {
    bool operator()(const Best& a, const Best& b) const {
      return a.count != b.count ? a.count < b.count : a.key > b.key;
    }
  };
  std::unordered_map<uint64_t, int64_t> counts_;
  std::unordered_map<uint64_t, std::vector<int32_t>> holders_;
  std::priority_queue<Best, std::vector<Best>, Order> heap_;
  std::vector<uint64_t> touched_;
};

// Replaces every non-overlapping (left, right), scanning left to right; true if any was found.
bool merge_in_word(std::vector<int32_t>& symbols, int32_t left, int32_t right, int32_t result) {
  size_t out = 0;
  bool found = false;
  for (size_t i = 0; i < symbols.size(); i++) {
    if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
      symbols[out++] = result;
      i++;
      found = true;
    } else {
      symbols[out++] = symbols[i];
    }
  }
  symbols.resize(out);
  return found;
}

}  // namespace

std::unique_ptr<BpeTokenizer> train_bpe(const std::vector<std::string>& docs,
                                        const BpeTrainOptions& options, const std::string& name) {
  const int32_t num_specials = static_cast<int32_t>(options.special_tokens.size());
  HLA_CHECK(num_specials >= 1, "BPE training needs at least one special token (eos)");
  HLA_CHECK(options.vocab_size >= 256 + num_specials, "BPE vocab size ", options.vocab_size,
            " is below the 256 bytes plus ", num_specials, " special tokens");

  BpeModel model;
  model.mode = BpeModel::Mode::ByteLevel;
  for (int b = 0; b < 256; b++) model.vocab.push_back(byte_level_token(std::string(1, char(b))));

  // A token string can be reached by two merge paths ("ab"+"c", "a"+"bc"); both merges then
  // produce the same id, as in Hugging Face's trainer, and the vocabulary grows only once.
  std::unordered_map<std::string, int32_t> id_of_token;
  for (int32_t b = 0; b < 256; b++) id_of_token[model.vocab[b]] = b;
  std::vector<Word> words = count_words(docs);
  PairTable pairs(words);
  std::vector<int32_t> last_visit(words.size(), -1);
  const size_t target_size = static_cast<size_t>(options.vocab_size - num_specials);
  for (int32_t m = 0; model.vocab.size() < target_size; m++) {
    PairTable::Best best = pairs.pop_best();
    if (best.count < std::max<int64_t>(options.min_frequency, 1)) break;
    int32_t left = static_cast<int32_t>(best.key >> 32), right = static_cast<int32_t>(best.key);
    std::string token = model.vocab[left] + model.vocab[right];
    auto [it, is_new] = id_of_token.emplace(token, static_cast<int32_t>(model.vocab.size()));
    if (is_new) model.vocab.push_back(token);
    int32_t result = it->second;
    model.merges.push_back({left, right, result});
    for (int32_t w : pairs.take_holders(best.key)) {
      if (last_visit[w] == m) continue;
      last_visit[w] = m;
      Word& word = words[w];
      Word before = word;
      if (!merge_in_word(word.symbols, left, right, result)) continue;
      pairs.add_word(before, w, -1);
      pairs.add_word(word, w, +1);
    }
    pairs.push_touched();
  }

  for (const auto& content : options.special_tokens) {
    HLA_CHECK(!id_of_token.count(content), "special token '", content,
              "' collides with a learned token; choose another name");
    int32_t id = static_cast<int32_t>(model.vocab.size());
    model.vocab.push_back(content);
    model.specials.push_back({id, content});
    id_of_token[content] = id;
  }
  model.eos_id = model.specials[0].id;
  model.pad_id = model.specials[num_specials > 1 ? 1 : 0].id;
  return std::make_unique<BpeTokenizer>(std::move(model), name);
}

}  // namespace hla::data
