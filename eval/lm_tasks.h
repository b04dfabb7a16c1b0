// The six zero-shot LM tasks: which file each reads, how a record becomes a prompt, and
// which metric papers report for it (shared/design/eval.md section 3).
//
// Two record layouts are read, detected per record:
//   uniform  {"context", "choices", "gold"} (multiple choice) or {"text"} (LAMBADA), the layout
//            of shared/data/eval, whose context is already the harness prompt;
//   Hugging Face exports with each data set's own fields:
//            ai2_arc     {question, choices: {text, label}, answerKey}
//            hellaswag   {activity_label, ctx_a, ctx_b, endings, label}
//            piqa        {goal, sol1, sol2, label}
//            openbookqa  {question_stem, choices: {text, label}, answerKey}
//            lambada     {text}
// A record that fits neither is an hla::Error naming the file, the line and the field.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hla::eval {

struct MultipleChoiceDoc {
  std::string context;               // the prompt, e.g. "Question: ...\nAnswer:"
  std::vector<std::string> choices;  // answer texts; scored as " " + choice
  int gold = 0;                      // index into choices
};

struct LambadaDoc {
  std::string context;  // the passage without its last space-separated word
  std::string target;   // " " + that word
};

enum class TaskFormat { MultipleChoice, Lambada };

struct LmTaskInfo {
  std::string name;          // "arc_easy"; the --tasks name
  std::string file_name;     // "arc_easy.jsonl", looked up in --data-dir
  std::string title;         // column title in report tables, "ARC-e"
  TaskFormat format;
  std::string paper_metric;  // the metric Mamba/GLA/DeltaNet tables report: "acc" or "acc_norm"
};

const std::vector<LmTaskInfo>& lm_tasks();
// nullptr when `name` is not an LM task; "lambada_openai" is accepted for "lambada".
const LmTaskInfo* find_lm_task(std::string_view name);

// One record to a document; throws hla::Error naming the offending field.
MultipleChoiceDoc parse_multiple_choice(std::string_view task, const nlohmann::json& record);
LambadaDoc parse_lambada(const nlohmann::json& record);
LambadaDoc lambada_doc_from_text(const std::string& text);

// Whole JSONL files (blank lines are skipped). Errors read "<path>:<line>: <what>".
std::vector<MultipleChoiceDoc> read_multiple_choice(std::string_view task, const std::string& path);
std::vector<LambadaDoc> read_lambada(const std::string& path);

}  // namespace hla::eval
