// Held-out perplexity (see perplexity.h).
#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>

#include "data/corpus.h"
#include "data/shard.h"
#include "eval/text_util.h"
#include "tensor/error.h"

namespace hla::eval {

std::vector<ScoreRequest> rolling_window_requests(const std::vector<int32_t>& tokens,
                                                  int32_t eos, int window) {
  HLA_CHECK(window >= 1, "perplexity window must be positive, got ", window);
  std::vector<int32_t> seq = {eos};  // (n + 1): seq[i] is predicted from seq[0..i-1]
  seq.insert(seq.end(), tokens.begin(), tokens.end());
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<ScoreRequest> requests;
  for (int64_t first = 1; first <= n; first += window) {
    const int64_t last = std::min(n, first + window - 1);  // predictions seq[first..last]
    const int64_t begin = std::max<int64_t>(0, last - window);  // input seq[begin..last-1]
    ScoreRequest r;
    r.tokens.assign(seq.begin() + begin, seq.begin() + last);
    for (int64_t t = first; t <= last; t++) {
      r.positions.push_back(static_cast<int32_t>(t - 1 - begin));
      r.targets.push_back(seq[t]);
    }
    requests.push_back(std::move(r));
  }
  return requests;
}

PerplexityTotals score_documents(LanguageModel& model, const data::Tokenizer& tokenizer,
                                 const std::vector<std::string>& documents,
                                 const PerplexityOptions& options) {
  const int window = options.window > 0 ? options.window : std::min(model.max_length(), 8192);
  PerplexityTotals totals;
  std::vector<ScoreRequest> requests;
  for (const std::string& doc : documents) {
    std::vector<int32_t> tokens = tokenizer.encode(doc);
    std::vector<ScoreRequest> doc_requests = rolling_window_requests(tokens, tokenizer.eos_id(), window);
    requests.insert(requests.end(), doc_requests.begin(), doc_requests.end());
    totals.tokens += static_cast<int64_t>(tokens.size());
    totals.bytes += static_cast<int64_t>(doc.size());
    totals.words += static_cast<int64_t>(split_whitespace(doc).size());
    totals.documents++;
  }
  for (const auto& scores : score_in_batches(model, requests, options.batch))
    for (const TargetScore& t : scores) totals.logprob += t.logprob;
  return totals;
}

namespace {

bool is_shard(const std::string& path) {
  auto ends_with = [&](const std::string& suffix) {
    return path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".bin") || ends_with(".bin.zst");
}

// A shard's token stream split at eos into documents, decoded back to text so that bytes and
// words are counted the same way as for text input.
std::vector<std::string> shard_documents(const std::string& path, const data::Tokenizer& tokenizer,
                                         int64_t max_documents) {
  std::vector<std::string> docs;
  std::vector<int32_t> current;
  auto flush = [&] {
    if (!current.empty()) docs.push_back(tokenizer.decode(current));
    current.clear();
  };
  for (int32_t t : data::read_shard_tokens(path)) {
    if (max_documents >= 0 && static_cast<int64_t>(docs.size()) >= max_documents) return docs;
    if (t == tokenizer.eos_id()) flush();
    else current.push_back(t);
  }
  if (max_documents < 0 || static_cast<int64_t>(docs.size()) < max_documents) flush();
  return docs;
}

std::vector<std::string> text_documents(const std::string& path, int64_t max_documents) {
  data::CorpusReader reader(data::expand_corpus_inputs({path}), {});
  std::vector<std::string> docs;
  std::string doc;
  while ((max_documents < 0 || static_cast<int64_t>(docs.size()) < max_documents) && reader.next(doc))
    docs.push_back(doc);
  return docs;
}

}  // namespace

nlohmann::json run_perplexity(LanguageModel& model, const data::Tokenizer& tokenizer,
                              const std::string& path, const PerplexityOptions& options) {
  std::vector<std::string> docs = is_shard(path)
                                      ? shard_documents(path, tokenizer, options.max_documents)
                                      : text_documents(path, options.max_documents);
  if (docs.empty()) fail(path, ": no documents to score");
  PerplexityOptions opts = options;
  opts.batch.label = "ppl";
  PerplexityTotals t = score_documents(model, tokenizer, docs, opts);
  HLA_CHECK(t.tokens > 0, path, ": the documents have no tokens");
  const double loss = -t.logprob / static_cast<double>(t.tokens);
  return {{"file", path},
          {"documents", t.documents},
          {"tokens", t.tokens},
          {"bytes", t.bytes},
          {"loss", loss},
          {"perplexity", std::exp(loss)},
          {"bits_per_byte", -t.logprob / (std::log(2.0) * static_cast<double>(t.bytes))},
          {"word_perplexity", std::exp(-t.logprob / static_cast<double>(std::max<int64_t>(1, t.words)))}};
}

}  // namespace hla::eval
