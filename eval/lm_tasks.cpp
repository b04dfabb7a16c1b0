// Readers and prompt rendering for the six LM tasks, following lm-evaluation-harness task
// definitions (doc_to_text / doc_to_choice / doc_to_target) for zero-shot evaluation.
#include "eval/lm_tasks.h"

#include <climits>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "eval/text_util.h"
#include "tensor/error.h"
#include "tensor/json.h"

namespace hla::eval {

using nlohmann::json;

const std::vector<LmTaskInfo>& lm_tasks() {
  static const std::vector<LmTaskInfo> tasks = {
      {"lambada", "lambada_openai.jsonl", "LAMBADA", TaskFormat::Lambada, "acc"},
      {"piqa", "piqa.jsonl", "PIQA", TaskFormat::MultipleChoice, "acc"},
      {"hellaswag", "hellaswag.jsonl", "Hella.", TaskFormat::MultipleChoice, "acc_norm"},
      {"arc_easy", "arc_easy.jsonl", "ARC-e", TaskFormat::MultipleChoice, "acc"},
      {"arc_challenge", "arc_challenge.jsonl", "ARC-c", TaskFormat::MultipleChoice, "acc_norm"},
      {"openbookqa", "openbookqa.jsonl", "OBQA", TaskFormat::MultipleChoice, "acc"},
  };
  return tasks;
}

const LmTaskInfo* find_lm_task(std::string_view name) {
  if (name == "lambada_openai") name = "lambada";
  for (const auto& t : lm_tasks())
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

const json& field(const json& record, const char* name) {
  auto it = record.find(name);
  if (it == record.end()) fail("missing field \"", name, "\"");
  return *it;
}

std::string string_field(const json& record, const char* name) {
  const json& v = field(record, name);
  if (!v.is_string()) fail("field \"", name, "\" must be a string, got ", json_excerpt(v));
  return v.get<std::string>();
}

std::vector<std::string> string_list(const json& v, const std::string& what) {
  if (!v.is_array()) fail("field \"", what, "\" must be a list of strings, got ", json_excerpt(v));
  std::vector<std::string> out;
  for (const json& item : v) {
    if (!item.is_string()) fail("field \"", what, "\" must hold strings, got ", json_excerpt(item));
    out.push_back(item.get<std::string>());
  }
  return out;
}

// A label given as an int or a string holding an int (hellaswag exports "3").
int int_label(const json& record, const char* name) {
  const json& v = field(record, name);
  if (v.is_number_integer() && v.get<int64_t>() >= INT_MIN && v.get<int64_t>() <= INT_MAX) return v.get<int>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == s.size() && !s.empty()) return value;
  }
  fail("field \"", name, "\" must be an integer label, got ", json_excerpt(v));
}

// ai2_arc and openbookqa: gold = choices.label.index(answerKey.lstrip()).
int gold_from_answer_key(const json& record) {
  const json& choices = field(record, "choices");
  if (!choices.is_object()) fail("field \"choices\" must be {text, label}, got ", json_excerpt(choices));
  std::vector<std::string> labels = string_list(field(choices, "label"), "choices.label");
  std::string key = string_field(record, "answerKey");
  size_t first = key.find_first_not_of(" \t\n\r\v\f");
  key = first == std::string::npos ? "" : key.substr(first);
  for (size_t i = 0; i < labels.size(); i++)
    if (labels[i] == key) return static_cast<int>(i);
  fail("answerKey \"", excerpt(key), "\" is not one of choices.label ", json_excerpt(field(choices, "label")));
}

std::vector<std::string> choice_texts(const json& record) {
  const json& choices = field(record, "choices");
  if (!choices.is_object()) fail("field \"choices\" must be {text, label}, got ", json_excerpt(choices));
  return string_list(field(choices, "text"), "choices.text");
}

bool is_uniform_layout(const json& record) {
  return record.contains("context") && record.contains("choices") && record.contains("gold") &&
         record["choices"].is_array();
}

MultipleChoiceDoc parse_uniform(const json& record) {
  MultipleChoiceDoc doc;
  doc.context = string_field(record, "context");
  doc.choices = string_list(field(record, "choices"), "choices");
  doc.gold = int_label(record, "gold");
  return doc;
}

MultipleChoiceDoc parse_arc(const json& record) {
  MultipleChoiceDoc doc;
  doc.context = "Question: " + string_field(record, "question") + "\nAnswer:";
  doc.choices = choice_texts(record);
  doc.gold = gold_from_answer_key(record);
  return doc;
}

MultipleChoiceDoc parse_hellaswag(const json& record) {
  std::string ctx = string_field(record, "ctx_a") + " " +
                    python_capitalize(string_field(record, "ctx_b"));
  MultipleChoiceDoc doc;
  doc.context = hellaswag_preprocess(string_field(record, "activity_label") + ": " + ctx);
  for (const std::string& ending : string_list(field(record, "endings"), "endings"))
    doc.choices.push_back(hellaswag_preprocess(ending));
  doc.gold = int_label(record, "label");
  return doc;
}

MultipleChoiceDoc parse_piqa(const json& record) {
  MultipleChoiceDoc doc;
  doc.context = "Question: " + string_field(record, "goal") + "\nAnswer:";
  doc.choices = {string_field(record, "sol1"), string_field(record, "sol2")};
  doc.gold = int_label(record, "label");
  return doc;
}

MultipleChoiceDoc parse_openbookqa(const json& record) {
  MultipleChoiceDoc doc;
  doc.context = string_field(record, "question_stem");
  doc.choices = choice_texts(record);
  doc.gold = gold_from_answer_key(record);
  return doc;
}

// A record that would score without meaning: no context, an empty choice (acc_norm divides by
// its length), fewer than 2 choices, a gold index outside them.
void check_multiple_choice(const MultipleChoiceDoc& doc) {
  if (strip(doc.context).empty()) fail("the context is empty");
  if (doc.choices.size() < 2) fail("a multiple-choice record needs at least 2 choices, got ",
                                   doc.choices.size());
  for (size_t c = 0; c < doc.choices.size(); c++)
    if (doc.choices[c].empty()) fail("choice ", c, " is empty");
  if (doc.gold < 0 || doc.gold >= static_cast<int>(doc.choices.size()))
    fail("gold index ", doc.gold, " is outside the ", doc.choices.size(), " choices");
}

// Calls parse(record) for every non-blank line, prefixing any error with "path:line: ". A file
// without records is an error: it would report accuracy 0 over n = 0.
template <class Doc>
std::vector<Doc> read_jsonl(const std::string& path, const std::function<Doc(const json&)>& parse) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open file");
  std::vector<Doc> docs;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); line_no++) {
    if (strip(line).empty()) continue;
    const json record = parse_json(line, path + ":" + std::to_string(line_no));
    try {
      if (!record.is_object()) fail("a record must be a JSON object, got ", record.type_name());
      docs.push_back(parse(record));
    } catch (const Error& e) {
      fail(path, ":", line_no, ": ", e.what());
    }
  }
  if (docs.empty()) fail(path, ": no records (the file is empty)");
  return docs;
}

}  // namespace

MultipleChoiceDoc parse_multiple_choice(std::string_view task, const json& record) {
  struct HfLayout {
    const char* task;
    const char* fields;
    MultipleChoiceDoc (*parse)(const json&);
  };
  static const HfLayout layouts[] = {
      {"arc_easy", "{question, choices: {text, label}, answerKey}", parse_arc},
      {"arc_challenge", "{question, choices: {text, label}, answerKey}", parse_arc},
      {"hellaswag", "{activity_label, ctx_a, ctx_b, endings, label}", parse_hellaswag},
      {"piqa", "{goal, sol1, sol2, label}", parse_piqa},
      {"openbookqa", "{question_stem, choices: {text, label}, answerKey}", parse_openbookqa},
  };
  const HfLayout* layout = nullptr;
  for (const auto& l : layouts)
    if (task == l.task) layout = &l;
  if (!layout) fail("\"", task, "\" is not a multiple-choice task");
  MultipleChoiceDoc doc;
  if (is_uniform_layout(record)) {
    doc = parse_uniform(record);
  } else {
    try {
      doc = layout->parse(record);
    } catch (const Error& e) {
      fail(e.what(), " (a ", task, " record has the uniform layout {context, choices, gold} ",
           "or the Hugging Face layout ", layout->fields, ")");
    }
  }
  check_multiple_choice(doc);
  return doc;
}

LambadaDoc lambada_doc_from_text(const std::string& text) {
  // lm-eval-harness lambada_openai: " ".join(text.split(" ")[:-1]) and " " + text.split(" ")[-1]
  size_t last_space = text.rfind(' ');
  if (last_space == std::string::npos) return {"", " " + text};
  return {text.substr(0, last_space), " " + text.substr(last_space + 1)};
}

// A passage must end in a word after a space: an empty last word would be a free hit, and
// without a context there is nothing for the model to use.
LambadaDoc parse_lambada(const json& record) {
  const std::string text = string_field(record, "text");
  LambadaDoc doc = lambada_doc_from_text(text);
  if (doc.target == " ")
    fail("LAMBADA text ", json_excerpt(text), " has no last word to predict (it must end in a word after a space)");
  if (strip(doc.context).empty()) fail("LAMBADA text ", json_excerpt(text), " has no context before its last word");
  return doc;
}

std::vector<MultipleChoiceDoc> read_multiple_choice(std::string_view task, const std::string& path) {
  std::string task_name(task);
  return read_jsonl<MultipleChoiceDoc>(
      path, [&](const json& record) { return parse_multiple_choice(task_name, record); });
}

std::vector<LambadaDoc> read_lambada(const std::string& path) {
  return read_jsonl<LambadaDoc>(path, parse_lambada);
}

}  // namespace hla::eval
