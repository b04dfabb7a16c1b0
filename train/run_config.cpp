// RunConfig: the strict run-file reader, building the model config, validation, the settings
// table and its JSON copy.
#include "train/run_config.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "nn/model.h"
#include "tensor/json.h"
#include "train/checkpoint.h"

namespace hla {

namespace {

const char* const kValueForms = "not a TOML value (a \"string\", an integer, a number, true, false or a list [...])";

// One line of a run file, read left to right; errors start with "<file>:<line>: ".
class RunFileLine {
 public:
  RunFileLine(const std::string& text, std::string where) : text_(text), where_(std::move(where)) {}

  bool blank() {
    skip_space();
    return pos_ == text_.size() || text_[pos_] == '#';
  }
  bool opens_section() { return text_[pos_] == '['; }

  nlohmann::json only_value(const std::string& key) {
    skip_space();
    nlohmann::json v = value(key, true);
    end_of_line(key);
    return v;
  }

  std::string section() {
    pos_++;  // '['
    std::string name = bare_name("section names");
    skip_space();
    HLA_CHECK_INPUT(take(']'), where_, ": expected ']' after the section name");
    end_of_line(name);
    return name;
  }

  // key = value; the key goes into `key`.
  nlohmann::json assignment(std::string& key) {
    key = bare_name("keys");
    skip_space();
    HLA_CHECK_INPUT(take('='), where_, ": expected '=' after the key '", excerpt(key), "'");
    skip_space();
    nlohmann::json v = value(key, true);
    end_of_line(key);
    return v;
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) pos_++;
  }
  bool take(char c) {
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    pos_++;
    return true;
  }
  void end_of_line(const std::string& key) {
    skip_space();
    HLA_CHECK_INPUT(blank(), where_, ": ", excerpt(key), ": unexpected '", text_.substr(pos_, 20), "' after the value");
  }

  std::string bare_name(const char* what) {
    size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' ||
                                   text_[pos_] == '-'))
      pos_++;
    HLA_CHECK_INPUT(pos_ > start, where_, ": ", what, " are letters, digits, '_' and '-'");
    return text_.substr(start, pos_ - start);
  }

  nlohmann::json value(const std::string& key, bool list_allowed) {
    HLA_CHECK_INPUT(pos_ < text_.size(), where_, ": ", excerpt(key), ": the value is missing");
    char c = text_[pos_];
    if (c == '"' || c == '\'') return quoted(key);
    if (c == '[') {
      HLA_CHECK_INPUT(list_allowed, where_, ": ", excerpt(key), ": a list holds single values, not lists");
      return list(key);
    }
    size_t start = pos_;
    while (pos_ < text_.size() && !std::strchr(" \t,]#", text_[pos_])) pos_++;
    return scalar(key, text_.substr(start, pos_ - start));
  }

  // A "basic string" (escapes \" \\ \n \t) or a 'literal string'.
  std::string quoted(const std::string& key) {
    const char quote = text_[pos_++];
    std::string s;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      char c = text_[pos_++];
      if (c == '\\' && quote == '"') {
        HLA_CHECK_INPUT(pos_ < text_.size(), where_, ": ", excerpt(key), ": the string has no closing quote");
        char e = text_[pos_++];
        HLA_CHECK_INPUT(std::strchr("\"\\nt", e), where_, ": ", excerpt(key), ": unknown escape '\\", e,
                        "' (run files know \\\" \\\\ \\n \\t)");
        c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
      }
      s += c;
    }
    HLA_CHECK_INPUT(take(quote), where_, ": ", excerpt(key), ": the string has no closing quote");
    return s;
  }

  nlohmann::json list(const std::string& key) {
    pos_++;  // '['
    nlohmann::json items = nlohmann::json::array();
    for (;;) {
      skip_space();
      HLA_CHECK_INPUT(pos_ < text_.size(), where_, ": ", excerpt(key), ": the list has no closing ']'");
      if (take(']')) return items;
      items.push_back(value(key, false));
      skip_space();
      if (!take(',')) {
        HLA_CHECK_INPUT(take(']'), where_, ": ", excerpt(key), ": the list has no closing ']'");
        return items;
      }
    }
  }

  // true, false, an integer (digits, '_' between them) or a decimal number.
  nlohmann::json scalar(const std::string& key, const std::string& token) {
    if (token == "true" || token == "false") return token == "true";
    std::string digits;
    for (size_t i = 0; i < token.size(); i++) {
      const bool between_digits = i > 0 && i + 1 < token.size() && std::isdigit(static_cast<unsigned char>(token[i - 1])) &&
                                  std::isdigit(static_cast<unsigned char>(token[i + 1]));
      if (token[i] == '_' && between_digits) continue;
      HLA_CHECK_INPUT(token[i] != '\0' && std::strchr("0123456789+-.eE", token[i]), where_, ": ", excerpt(key),
                      " = ", excerpt(token), ": ", kValueForms);
      digits += token[i];
    }
    const bool integer = digits.find_first_of(".eE") == std::string::npos;
    char* end = nullptr;
    errno = 0;
    nlohmann::json v;
    if (integer) v = static_cast<int64_t>(std::strtoll(digits.c_str(), &end, 10));
    else v = std::strtod(digits.c_str(), &end);
    HLA_CHECK_INPUT(!digits.empty() && end == digits.c_str() + digits.size(), where_, ": ", excerpt(key), " = ",
                    excerpt(token), ": ", kValueForms);
    HLA_CHECK_INPUT(errno != ERANGE, where_, ": ", excerpt(key), " = ", excerpt(token), ": the number is out of range");
    return v;
  }

  const std::string& text_;
  std::string where_;
  size_t pos_ = 0;
};

}  // namespace

nlohmann::json parse_run_file(const std::string& text, const std::string& source) {
  nlohmann::json file = nlohmann::json::object();
  nlohmann::json* table = &file;
  std::string section;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); number++) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string where = source + ":" + std::to_string(number);
    RunFileLine reader(line, where);
    if (reader.blank()) continue;
    if (reader.opens_section()) {
      section = reader.section();
      HLA_CHECK_INPUT(!file.contains(section), where, ": section [", excerpt(section), "] is given twice");
      table = &(file[section] = nlohmann::json::object());
      continue;
    }
    std::string key;
    nlohmann::json value = reader.assignment(key);
    HLA_CHECK_INPUT(!table->contains(key), where, ": key '", excerpt(key), "' is given twice",
                    section.empty() ? std::string() : " in [" + section + "]");
    (*table)[key] = std::move(value);
  }
  return file;
}

nlohmann::json read_run_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HLA_CHECK_INPUT(in, path, ": cannot open (", std::strerror(errno), ")");
  std::stringstream text;
  text << in.rdbuf();
  return parse_run_file(text.str(), path);
}

nlohmann::json parse_run_value(const std::string& text, const std::string& source, const std::string& key) {
  return RunFileLine(text, source).only_value(key);
}

void RunConfig::apply_run_file(const nlohmann::json& file, const std::string& source) {
  const std::set<std::string> from_command_line = explicitly_set;
  run_file = source;
  for (auto section = file.begin(); section != file.end(); ++section) {
    HLA_CHECK_INPUT(section->is_object(), source, ": '", excerpt(section.key()),
                    "' is outside a section ([model], [data], [optim], [train])");
    for (auto item = section->begin(); item != section->end(); ++item) {
      const std::string name = section.key() + "." + item.key();
      bool known = false;
      visit_settings(*this, [&](const std::string& s, const std::string& k, auto& value, const char*) {
        if (s != section.key() || k != item.key()) return;
        known = true;
        if (!from_command_line.count(name)) read_setting(*item, value, source, "[" + s + "] " + k);
      });
      HLA_CHECK_INPUT(known, source, ": unknown setting '[", excerpt(section.key()), "] ", excerpt(item.key()),
                      "' (settings are [model], [data], [optim], [train] keys; `hla train --help` lists them)");
      explicitly_set.insert(name);
    }
  }
}

ModelConfig RunConfig::model_config(int data_vocab) const {
  const bool from_file = !model.config.empty();
  const std::string source = from_file ? model.config : (run_file.empty() ? "--model flags" : run_file + " [model]");
  auto given = [&](const std::string& key) { return !from_file || explicitly_set.count("model." + key) > 0; };
  // A file's fields, else the [model] section's; a file without vocab_size takes the data's.
  ModelConfig config = from_file ? ModelConfig::parse_json(read_json_file(model.config), source, ModelSettings().fields)
                                 : model.fields;
  if (from_file) {
    ModelConfig::visit_fields(
        [&](const ModelField& field, auto& into, const auto& setting) {
          if (given(field.key())) into = setting;
        },
        config, model.fields);
  }
  // Attention layers: an explicit list wins over the shorthand; a file's list stays unless
  // either is given. config.json has no attn block without attention layers, so the block's
  // settings go with it.
  if (given("attn_layers") && !model.fields.attn.layers.empty()) config.attn.layers = model.fields.attn.layers;
  else if (given("hybrid")) config.attn.layers = hybrid_attention_layers(config.num_hidden_layers, model.hybrid);
  config.has_attn = !config.attn.layers.empty();
  if (!config.has_attn) config.attn = AttnConfig();
  if (config.vocab_size == 0) config.vocab_size = data_vocab;
  config.validate(source);
  HLA_CHECK_INPUT(config.vocab_size >= data_vocab, source, ": vocab_size ", config.vocab_size,
            " is smaller than the data's vocabulary (", data_vocab, ")");
  return config;
}

ScheduleConfig RunConfig::schedule() const {
  ScheduleConfig s = optim.schedule;
  s.total_steps = train.steps;
  return s;
}

void RunConfig::validate() const {
  visit_settings(*this, [](const std::string& section, const std::string& key, const auto& value, const char*) {
    if constexpr (std::is_floating_point_v<std::decay_t<decltype(value)>>)
      HLA_CHECK_INPUT(std::isfinite(value), "[", section, "] ", key, " must be a finite number, got ", value);
  });
  optim.optim.validate();
  schedule().validate();
  HLA_CHECK_INPUT(optim.clip >= 0, "[optim] clip must be >= 0 (0 = off), got ", optim.clip);
  HLA_CHECK_INPUT(!data.source.empty(),
                  "[data] source is empty: give mqar, text files or a shard directory (--data.source PATH)");
  HLA_CHECK_INPUT(data.batch_size >= 1, "[data] batch_size must be >= 1, got ", data.batch_size);
  HLA_CHECK_INPUT(data.seq_len >= 2, "[data] seq_len must be >= 2 (an input and its next-token target), got ",
                  data.seq_len);
  HLA_CHECK_INPUT(data.val_fraction >= 0 && data.val_fraction < 1, "[data] val_fraction must be in [0, 1), got ",
                  data.val_fraction);
  HLA_CHECK_INPUT(data.documents == "windows" || data.documents == "reset", "[data] documents: '",
                  excerpt(data.documents), "' is not a document mode (windows | reset)");
  HLA_CHECK_INPUT(data.documents == "windows" || data.source != "mqar", "[data] documents = reset needs documents ",
                  "separated by the tokenizer's EOS (text files or token shards); [data] source mqar has none");
  HLA_CHECK_INPUT(data.mqar_vocab >= 1 && data.mqar_vocab <= std::numeric_limits<int>::max(),
                  "[data] mqar_vocab must be in [1, ", std::numeric_limits<int>::max(), "], got ", data.mqar_vocab);
  HLA_CHECK_INPUT(data.mqar_kv_pairs >= 1, "[data] mqar_kv_pairs must be >= 1, got ", data.mqar_kv_pairs);
  HLA_CHECK_INPUT(data.mqar_train_examples >= 0, "[data] mqar_train_examples must be >= 0, got ",
                  data.mqar_train_examples);
  HLA_CHECK_INPUT(train.grad_accum >= 1, "[train] grad_accum must be >= 1, got ", train.grad_accum);
  int64_t tokens = 0;
  HLA_CHECK_INPUT(!__builtin_mul_overflow(data.batch_size, data.seq_len, &tokens) &&
                      !__builtin_mul_overflow(tokens, train.grad_accum, &tokens),
                  "[data] batch_size ", data.batch_size, " * seq_len ", data.seq_len, " * [train] grad_accum ",
                  train.grad_accum, " tokens per update overflows int64");
  HLA_CHECK_INPUT(train.device == "cpu" || train.device == "cuda", "[train] device: '", excerpt(train.device),
                  "' is not a device (cpu | cuda)");
  HLA_CHECK_INPUT(train.dtype == "f32" || train.dtype == "bf16", "[train] dtype: '", excerpt(train.dtype),
                  "' is not a compute dtype (f32 | bf16)");
  parse_recompute(train.recompute, "[train] recompute");
  HLA_CHECK_INPUT(train.dtype == "f32" || train.device == "cuda",
                  "[train] dtype bf16 needs device cuda (the CPU computes in f32)");
  HLA_CHECK_INPUT(train.log_every >= 1, "[train] log_every must be >= 1, got ", train.log_every);
  HLA_CHECK_INPUT(train.val_every >= 0, "[train] val_every must be >= 0, got ", train.val_every);
  HLA_CHECK_INPUT(train.val_batches >= 0, "[train] val_batches must be >= 0, got ", train.val_batches);
  HLA_CHECK_INPUT(train.save_every >= 0, "[train] save_every must be >= 0, got ", train.save_every);
  HLA_CHECK_INPUT(!train.out_dir.empty(), "[train] out_dir must not be empty");
  HLA_CHECK_INPUT(train.gpus >= 1, "[train] gpus must be >= 1, got ", train.gpus);
  HLA_CHECK_INPUT(train.zero == 0 || train.zero == 1, "[train] zero must be 0 (off) or 1 (ZeRO-1), got ", train.zero);
  HLA_CHECK_INPUT(train.zero == 0 || train.gpus > 1, "[train] zero = 1 shards the optimizer state over the ranks of ",
                  "--gpus N: it needs [train] gpus > 1, got ", train.gpus);
  HLA_CHECK_INPUT(train.bucket_mb > 0, "[train] bucket_mb must be > 0, got ", train.bucket_mb);
}

nlohmann::json RunConfig::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  visit_settings(*this, [&](const std::string& section, const std::string& key, const auto& value,
                            const char*) { j[section][key] = value; });
  return j;
}

std::string RunConfig::table() const {
  std::ostringstream os;
  visit_settings(*this, [&](const std::string& section, const std::string& key, const auto& value,
                            const char*) {
    std::string name = section + "." + key;
    nlohmann::json v = value;
    std::string shown = v.is_string() ? v.get<std::string>() : v.dump();
    if (shown.empty()) shown = "-";
    os << "  " << std::left << std::setw(30) << name << shown
       << (explicitly_set.count(name) ? "" : "  (default)") << "\n";
  });
  return os.str();
}

}  // namespace hla
