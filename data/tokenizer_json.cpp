// Hugging Face tokenizer.json <-> BpeModel. Reading accepts the two BPE layouts hla supports
// (ByteLevel as GPT-2; Metaspace/byte-fallback as Llama-2 and Mistral) and names the first part
// it does not understand; writing produces the same layouts. load_tokenizer picks between the
// byte tokenizer and a tokenizer.json.
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/bpe.h"
#include "tensor/atomic_file.h"
#include "tensor/error.h"
#include "tensor/json.h"

namespace hla::data {

namespace {

using nlohmann::json;
const char kMetaspace[] = "\xE2\x96\x81";  // "▁"
const char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char* kEosNames[] = {"<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|im_end|>"};
const char* kPadNames[] = {"<|pad|>", "<pad>", "[PAD]", "<|padding|>"};

std::string type_of(const json& j) { return j.is_object() ? j.value("type", "") : ""; }

// The components of a "Sequence" (normalizer, pre-tokenizer or decoder), or the one component.
std::vector<json> flatten(const json& j, const char* list_key) {
  if (j.is_null()) return {};
  if (type_of(j) != "Sequence") return {j};
  std::vector<json> parts;
  for (const auto& part : j.at(list_key)) {
    for (auto& p : flatten(part, list_key)) parts.push_back(p);
  }
  return parts;
}

// A token quoted for an error message: JSON-escaped, at most ~100 characters. (Not named
// "quoted": for a non-const std::string argument ADL prefers std::quoted, which prints it whole.)
std::string token_excerpt(const std::string& token) { return json_excerpt(json(token)); }

struct Reader {
  explicit Reader(std::string p) : path(std::move(p)) {}

  std::string path;
  BpeModel model;
  // Every id lies in [0, id_limit): vocabulary entries + added tokens, so added tokens may extend
  // the vocabulary (as Hugging Face appends them) but a stray id cannot allocate a huge table.
  int64_t id_limit = 0;
  std::unordered_map<int32_t, std::string> added_by_id;     // added token id -> content
  std::unordered_map<std::string, int32_t> added_by_content;  // and back

  [[noreturn]] void unsupported(const std::string& what) const {
    fail("tokenizer ", path, ": ", what, " is not supported (hla reads BPE tokenizers with a ",
         "ByteLevel pre-tokenizer, GPT-2 style, or with Metaspace/byte fallback, Llama-2 style)");
  }

  int32_t id_of(const std::unordered_map<std::string, int32_t>& ids, const std::string& token,
                const std::string& where) const {
    auto it = ids.find(token);
    if (it == ids.end())
      fail("tokenizer ", path, ": ", where, ": token ", token_excerpt(token), " is not in the vocabulary");
    return it->second;
  }

  // The id of `token` (what: "token" or "added token"), checked against id_limit.
  int32_t checked_id(const json& id, const char* what, const std::string& token) const {
    // (an unsigned id above INT64_MAX reads as negative here)
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= id_limit) {
      fail("tokenizer ", path, ": ", what, " ", token_excerpt(token), " has id ", json_excerpt(id),
           "; ids must be integers in [0, ", id_limit, ") (vocabulary entries + added tokens)");
    }
    return id.get<int32_t>();
  }

  // Puts `token` at `id` in the vocabulary; a second token at the same id is an error.
  void place(int32_t id, const std::string& token) {
    if (static_cast<size_t>(id) >= model.vocab.size()) model.vocab.resize(id + 1);
    if (!model.vocab[id].empty()) {
      fail("tokenizer ", path, ": tokens ", token_excerpt(model.vocab[id]), " and ", token_excerpt(token),
           " both have id ", id);
    }
    model.vocab[id] = token;
  }

  // A merge as "left right" (older files) or ["left", "right"] (newer ones).
  std::pair<std::string, std::string> merge_parts(const json& merge, const std::string& where) const {
    if (merge.is_string()) {
      const std::string s = merge;
      const size_t space = s.find(' ');
      if (space != std::string::npos) return {s.substr(0, space), s.substr(space + 1)};
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      return {merge[0], merge[1]};
    }
    fail("tokenizer ", path, ": ", where, " must be \"left right\" or [\"left\", \"right\"], got ", json_excerpt(merge));
  }

  void read_model(const json& m) {
    std::string type = m.value("type", m.contains("merges") ? "BPE" : "");
    if (type != "BPE") unsupported("model type '" + excerpt(type) + "'");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (m.contains(key) && !m[key].is_null() && m[key] != "") unsupported(std::string("model.") + key);
    }
    const json& vocab = m.at("vocab");
    if (!vocab.is_object()) fail("tokenizer ", path, ": model.vocab must be an object {token: id}");
    std::unordered_map<std::string, int32_t> ids;
    for (const auto& [token, id] : vocab.items()) {
      int32_t i = checked_id(id, "token", token);
      place(i, token);
      ids[token] = i;
    }
    const json& merges = m.at("merges");
    if (!merges.is_array()) fail("tokenizer ", path, ": model.merges must be a list");
    for (size_t rank = 0; rank < merges.size(); rank++) {
      const std::string where = "merge " + std::to_string(rank);
      const auto [left, right] = merge_parts(merges[rank], where);
      model.merges.push_back({id_of(ids, left, where), id_of(ids, right, where),
                              id_of(ids, left + right, where)});
    }
    model.ignore_merges = m.value("ignore_merges", false);
    model.byte_fallback = m.value("byte_fallback", false);
    if (m.contains("unk_token") && m["unk_token"].is_string()) {
      model.unk_id = id_of(ids, m["unk_token"], "unk_token");
    }
  }

  // An added token may repeat a vocabulary entry (GPT-2's <|endoftext|>, Llama's </s>); its
  // content wins when decoding. Two added tokens with one id, or one content twice, are errors.
  void read_added_tokens(const json& added) {
    if (!added.is_array()) fail("tokenizer ", path, ": added_tokens must be a list");
    for (size_t k = 0; k < added.size(); k++) {
      const json& t = added[k];
      if (!t.is_object() || !t.contains("id") || !t.contains("content") || !t["content"].is_string()) {
        fail("tokenizer ", path, ": added token ", k, " must be {\"id\": integer, \"content\": string}, got ",
             json_excerpt(t));
      }
      const std::string content = t["content"];
      const int32_t id = checked_id(t["id"], "added token", content);
      if (added_by_id.count(id)) {
        fail("tokenizer ", path, ": added tokens ", token_excerpt(added_by_id[id]), " and ", token_excerpt(content),
             " both have id ", id);
      }
      if (added_by_content.count(content)) {
        fail("tokenizer ", path, ": added token ", token_excerpt(content), " appears twice (ids ",
             added_by_content[content], " and ", id, ")");
      }
      added_by_id[id] = content;
      added_by_content[content] = id;
      if (static_cast<size_t>(id) >= model.vocab.size()) model.vocab.resize(id + 1);
      if (model.vocab[id].empty()) model.vocab[id] = content;
      model.specials.push_back({id, content});
    }
  }

  // Sets the mode from the pre-tokenizer, then the Metaspace options from the normalizer.
  void read_pipeline(const json& normalizer, const json& pre_tokenizer, const json& decoder) {
    bool byte_level = false, metaspace = false;
    for (const auto& p : flatten(pre_tokenizer, "pretokenizers")) {
      std::string type = type_of(p);
      if (type == "ByteLevel") {
        if (p.value("add_prefix_space", false)) unsupported("ByteLevel add_prefix_space=true");
        byte_level = true;
      } else if (type == "Split" && p.contains("pattern") &&
                 p["pattern"].value("Regex", "") == kGpt2Pattern) {
        byte_level = true;
      } else if (type == "Metaspace") {
        metaspace = true;
        std::string scheme = p.value("prepend_scheme", p.value("add_prefix_space", true) ? "always" : "never");
        model.prepend_if_missing = scheme != "never";
        model.split_on_metaspace = p.value("split", true);
        if (p.value("replacement", kMetaspace) != kMetaspace) unsupported("Metaspace replacement");
      } else {
        unsupported("pre-tokenizer '" + (type.empty() ? json_excerpt(p) : type) + "'");
      }
    }
    for (const auto& n : flatten(normalizer, "normalizers")) {
      std::string type = type_of(n);
      if (type == "Prepend" && n.value("prepend", "") == kMetaspace) {
        model.prepend_always = true;
      } else if (type == "Replace" && n.contains("pattern") &&
                 n["pattern"].value("String", "") == " " && n.value("content", "") == kMetaspace) {
        metaspace = true;
      } else {
        unsupported("normalizer '" + (type.empty() ? json_excerpt(n) : type) + "'");
      }
    }
    if (byte_level == metaspace) unsupported("a tokenizer with neither or both of ByteLevel and Metaspace");
    model.mode = byte_level ? BpeModel::Mode::ByteLevel : BpeModel::Mode::Metaspace;
    if (byte_level && model.prepend_always) unsupported("a Prepend normalizer with ByteLevel");
    for (const auto& d : flatten(decoder, "decoders")) {
      std::string type = type_of(d);
      bool strip = type == "Strip" && d.value("content", "") == " " && d.value("start", 0) == 1;
      bool meta = type == "Metaspace" && d.value("prepend_scheme", "always") != "never";
      if (strip || meta) model.strip_leading_space = true;
    }
  }

  int32_t find_special(const char* const* names, size_t count) const {
    for (size_t k = 0; k < count; k++) {
      for (const auto& s : model.specials) {
        if (s.content == names[k]) return s.id;
      }
    }
    return -1;
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open tokenizer file ", path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

std::unique_ptr<BpeTokenizer> load_tokenizer_json(const std::string& path) {
  const json j = parse_json(read_file(path), "tokenizer " + path);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    fail("tokenizer ", path, ": not a Hugging Face tokenizer.json (no \"model\" object)");
  }
  Reader r(path);
  try {
    const json added = j.value("added_tokens", json::array());
    const json& model = j["model"];
    r.id_limit = static_cast<int64_t>((model.contains("vocab") ? model["vocab"].size() : 0) + added.size());
    r.read_model(model);
    r.read_added_tokens(added);
    r.read_pipeline(j.value("normalizer", json()), j.value("pre_tokenizer", json()),
                    j.value("decoder", json()));
  } catch (const json::exception& e) {
    fail("tokenizer ", path, ": unexpected JSON structure (", e.what(), ")");
  }
  r.model.eos_id = r.find_special(kEosNames, std::size(kEosNames));
  if (r.model.eos_id < 0) {
    fail("tokenizer ", path, ": no end-of-text token among the added tokens (looked for ",
         "<|endoftext|>, </s>, <|end_of_text|>, <eos>, <|im_end|>); hla separates documents with it");
  }
  r.model.pad_id = r.find_special(kPadNames, std::size(kPadNames));
  if (r.model.pad_id < 0) r.model.pad_id = r.model.eos_id;
  return std::make_unique<BpeTokenizer>(std::move(r.model), "bpe:" + path);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "byte") return make_byte_tokenizer();
  return load_tokenizer_json(spec);
}

void save_tokenizer_json(const BpeTokenizer& tokenizer, const std::string& path) {
  using ojson = nlohmann::ordered_json;
  const BpeModel& m = tokenizer.model();
  bool byte_level = m.mode == BpeModel::Mode::ByteLevel;
  ojson added = ojson::array();
  for (const auto& s : m.specials) {
    added.push_back({{"id", s.id}, {"content", s.content}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                     {"special", true}});
  }
  ojson vocab = ojson::object();
  bool any_space = false;
  for (size_t id = 0; id < m.vocab.size(); id++) {
    if (m.vocab[id].empty()) continue;
    vocab[m.vocab[id]] = id;
    any_space |= m.vocab[id].find(' ') != std::string::npos;
  }
  ojson merges = ojson::array();
  for (const auto& merge : m.merges) {
    const std::string &left = m.vocab[merge.left], &right = m.vocab[merge.right];
    merges.push_back(any_space ? ojson::array({left, right}) : ojson(left + " " + right));
  }
  ojson byte_level_step = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                           {"trim_offsets", true}, {"use_regex", true}};
  ojson normalizer, pre_tokenizer, decoder;
  if (byte_level) {
    pre_tokenizer = byte_level_step;
    decoder = byte_level_step;
  } else {
    ojson steps = ojson::array();
    if (m.prepend_always) steps.push_back({{"type", "Prepend"}, {"prepend", kMetaspace}});
    steps.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMetaspace}});
    normalizer = {{"type", "Sequence"}, {"normalizers", steps}};
    if (m.prepend_if_missing || m.split_on_metaspace) {
      pre_tokenizer = {{"type", "Metaspace"}, {"replacement", kMetaspace},
                       {"prepend_scheme", m.prepend_if_missing ? "first" : "never"},
                       {"split", m.split_on_metaspace}};
    }
    ojson decoders = ojson::array({{{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}},
                                   {{"type", "ByteFallback"}},
                                   {{"type", "Fuse"}}});
    if (m.strip_leading_space) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    decoder = {{"type", "Sequence"}, {"decoders", decoders}};
  }
  ojson model = {{"type", "BPE"}, {"dropout", nullptr},
                 {"unk_token", m.unk_id >= 0 ? ojson(m.vocab[m.unk_id]) : ojson()},
                 {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                 {"fuse_unk", !byte_level}, {"byte_fallback", m.byte_fallback},
                 {"ignore_merges", m.ignore_merges}, {"vocab", vocab}, {"merges", merges}};
  ojson j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
             {"added_tokens", added}, {"normalizer", normalizer}, {"pre_tokenizer", pre_tokenizer},
             {"post_processor", nullptr}, {"decoder", decoder}, {"model", model}};
  write_file_atomic(path, j.dump(1, ' ', false) + "\n");
}

}  // namespace hla::data
