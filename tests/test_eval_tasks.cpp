// LM task records to prompts (golden strings, both record layouts), HellaSwag preprocessing,
// and readers that reject malformed, degenerate or deeply nested records and empty files,
// naming the file and line.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "eval/lm_tasks.h"
#include "eval/text_util.h"
#include "tensor/error.h"
#include "tests/test_util.h"

using namespace hla::eval;
using hla::testing::error_of;
using nlohmann::json;

namespace {

std::string write_temp(const std::string& name, const std::string& content) {
  auto path = std::filesystem::temp_directory_path() / ("hla_test_eval_" + name);
  std::ofstream(path, std::ios::binary) << content;
  return path.string();
}

}  // namespace

TEST_CASE("eval: hellaswag preprocess matches the harness regex and replaces") {
  // Python: preprocess("Home and Garden: " + ctx_a + " " + ctx_b.capitalize())
  CHECK(hellaswag_preprocess("Home and Garden: [header] How to clean a grill [title] Heat the "
                             "grill. Then scrub it  [step] well.") ==
        "Home and Garden: How to clean a grill. Heat the grill. Then scrub it  well.");
  // '.' in "\[.*?\]" does not cross a newline; an unclosed '[' stays
  CHECK(hellaswag_preprocess("  a [b\nc] d [x]y[  ") == "a [b\nc] d y[");
  CHECK(hellaswag_preprocess(" [title] x") == " x");
  // re.sub(r"\[.*?\]", "", s) in Python gives each of these
  CHECK(hellaswag_preprocess("[[a]b") == "b");
  CHECK(hellaswag_preprocess("x[a\n[b]c[[") == "x[a\nc[[");
  CHECK(hellaswag_preprocess("[[[\n[[]]z") == "[[[\n]z");
  CHECK(hellaswag_preprocess("]a[b]]") == "]a]");
  // a long run of unclosed '[' is one linear pass (the fuzzer found the quadratic scan)
  CHECK(hellaswag_preprocess(std::string(1 << 20, '[')) == std::string(1 << 20, '['));
  CHECK(python_capitalize("THEN scrub") == "Then scrub");
  CHECK(python_capitalize("") == "");
  CHECK(replace_all("a    b", "  ", " ") == "a  b");
  CHECK(utf8_length("caf\xC3\xA9") == 4);
}

TEST_CASE("eval: hellaswag record renders like lm-evaluation-harness") {
  json record = json::parse(R"({"ind": 4, "activity_label": "Removing ice from car",
    "ctx_a": "Then, the man writes over the snow covering the window of a car, and a woman wearing winter clothes smiles.",
    "ctx_b": "then", "ctx": "unused",
    "endings": [", the man adds wax to the windshield and cuts it.", " [header] a person [title] board a ski lift.",
                ", the man puts on a christmas coat.", ", the man continues removing the snow on his car."],
    "label": "3", "split": "val"})");
  MultipleChoiceDoc doc = parse_multiple_choice("hellaswag", record);
  CHECK(doc.context ==
        "Removing ice from car: Then, the man writes over the snow covering the window of a car, "
        "and a woman wearing winter clothes smiles. Then");
  REQUIRE(doc.choices.size() == 4);
  CHECK(doc.choices[0] == ", the man adds wax to the windshield and cuts it.");
  CHECK(doc.choices[1] == " a person. board a ski lift.");
  CHECK(doc.gold == 3);
}

TEST_CASE("eval: ARC, PIQA and OpenBookQA Hugging Face records render as the harness does") {
  MultipleChoiceDoc arc = parse_multiple_choice("arc_challenge", json::parse(R"({
    "id": "Mercury_7175875", "question": "An astronomer observes that a planet rotates faster after a meteorite impact. Which is the most likely effect of this increase in rotation?",
    "choices": {"text": ["Planetary density will decrease.", "Planetary years will become longer.", "Planetary days will become shorter.", "Planetary gravity will become stronger."], "label": ["A", "B", "C", "D"]},
    "answerKey": "C"})"));
  CHECK(arc.context ==
        "Question: An astronomer observes that a planet rotates faster after a meteorite impact. "
        "Which is the most likely effect of this increase in rotation?\nAnswer:");
  CHECK(arc.choices[2] == "Planetary days will become shorter.");
  CHECK(arc.gold == 2);

  MultipleChoiceDoc numeric_keys = parse_multiple_choice("arc_easy", json::parse(R"({
    "question": "Q?", "choices": {"text": ["x", "y", "z"], "label": ["1", "2", "3"]}, "answerKey": "3"})"));
  CHECK(numeric_keys.gold == 2);
  CHECK(numeric_keys.choices.size() == 3);

  MultipleChoiceDoc piqa = parse_multiple_choice("piqa", json::parse(R"({
    "goal": "How do I ready a guinea pig cage for it's new occupants?",
    "sol1": "Provide the guinea pig with a cage full of a few inches of bedding made of ripped paper strips.",
    "sol2": "Provide the guinea pig with a cage full of a few inches of bedding made of ripped jeans material.",
    "label": 0})"));
  CHECK(piqa.context == "Question: How do I ready a guinea pig cage for it's new occupants?\nAnswer:");
  CHECK(piqa.choices.size() == 2);
  CHECK(piqa.gold == 0);

  MultipleChoiceDoc obqa = parse_multiple_choice("openbookqa", json::parse(R"({
    "id": "7-980", "question_stem": "The sun is responsible for",
    "choices": {"text": ["puppies learning new tricks", "children growing up and getting old", "flowers wilting in a vase", "plants sprouting, blooming and wilting"], "label": ["A", "B", "C", "D"]},
    "answerKey": " D"})"));
  CHECK(obqa.context == "The sun is responsible for");
  CHECK(obqa.gold == 3);
}

TEST_CASE("eval: the uniform layout is taken as given") {
  MultipleChoiceDoc doc = parse_multiple_choice("piqa", json::parse(R"({
    "id": 0, "context": "Question: Q?\nAnswer:", "choices": ["a", "b"], "gold": 1,
    "goal": "Q?", "sol1": "a", "sol2": "b"})"));
  CHECK(doc.context == "Question: Q?\nAnswer:");
  CHECK(doc.choices == std::vector<std::string>{"a", "b"});
  CHECK(doc.gold == 1);
  LambadaDoc lambada = parse_lambada(json::parse(R"({"id": 3, "text": "a b c"})"));
  CHECK(lambada.context == "a b");
  CHECK(lambada.target == " c");
}

TEST_CASE("eval: readers name the file and line of a malformed record") {
  const std::string good = R"({"context": "Q", "choices": ["a", "b"], "gold": 0})";
  std::string path = write_temp("bad_json.jsonl", good + "\n\n" + good + "\n{\"context\": \n");
  std::string err = error_of([&] { read_multiple_choice("arc_easy", path); });
  CHECK(err.find(path + ":4: not valid JSON") != std::string::npos);

  path = write_temp("bad_gold.jsonl", good + "\n" +
                                          R"({"context": "Q", "choices": ["a", "b"], "gold": 2})");
  err = error_of([&] { read_multiple_choice("piqa", path); });
  CHECK(err.find(path + ":2: gold index 2 is outside the 2 choices") != std::string::npos);

  path = write_temp("bad_layout.jsonl", R"({"goal": "Q", "sol1": "a", "label": 0})");
  err = error_of([&] { read_multiple_choice("piqa", path); });
  CHECK(err.find(path + ":1: missing field \"sol2\"") != std::string::npos);
  CHECK(err.find("{goal, sol1, sol2, label}") != std::string::npos);

  path = write_temp("bad_key.jsonl",
                    R"({"question": "Q", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "E"})");
  err = error_of([&] { read_multiple_choice("arc_easy", path); });
  CHECK(err.find(path + ":1: answerKey \"E\" is not one of choices.label") != std::string::npos);

  path = write_temp("bad_label.jsonl", R"({"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "endings": ["x", "y"], "label": ""})");
  err = error_of([&] { read_multiple_choice("hellaswag", path); });
  CHECK(err.find(path + ":1: field \"label\" must be an integer label") != std::string::npos);

  path = write_temp("bad_lambada.jsonl", "{\"text\": \"a b\"}\n{\"text\": 5}\n");
  err = error_of([&] { read_lambada(path); });
  CHECK(err.find(path + ":2: field \"text\" must be a string") != std::string::npos);

  err = error_of([&] { read_lambada("/nonexistent/lambada.jsonl"); });
  CHECK(err.find("/nonexistent/lambada.jsonl: cannot open file") != std::string::npos);
}

TEST_CASE("eval: the task table names files and the metric papers report") {
  REQUIRE(find_lm_task("lambada_openai") != nullptr);
  CHECK(find_lm_task("lambada_openai")->file_name == "lambada_openai.jsonl");
  CHECK(find_lm_task("hellaswag")->paper_metric == "acc_norm");
  CHECK(find_lm_task("arc_challenge")->paper_metric == "acc_norm");
  CHECK(find_lm_task("arc_easy")->paper_metric == "acc");
  CHECK(find_lm_task("piqa")->paper_metric == "acc");
  CHECK(find_lm_task("winogrande") == nullptr);
}

TEST_CASE("eval: a task file with no records is an error naming the file") {
  for (const std::string& content : {std::string(), std::string("\n  \n\n")}) {
    std::string path = write_temp("empty.jsonl", content);
    CHECK(error_of([&] { read_lambada(path); }) == path + ": no records (the file is empty)");
    CHECK(error_of([&] { read_multiple_choice("piqa", path); }) == path + ": no records (the file is empty)");
  }
}

TEST_CASE("eval: degenerate records are errors naming the file and line") {
  const std::string good_lambada = R"({"text": "a b c"})";
  auto lambada_error = [&](const std::string& record) {
    std::string path = write_temp("degenerate.jsonl", good_lambada + "\n" + record + "\n");
    return error_of([&] { read_lambada(path); });
  };
  const std::string path = write_temp("degenerate.jsonl", "");
  CHECK(lambada_error(R"({"text": ""})") ==
        path + ":2: LAMBADA text \"\" has no last word to predict (it must end in a word after a space)");
  CHECK(lambada_error(R"({"text": "a b "})").find(path + ":2: LAMBADA text \"a b \" has no last word") == 0);
  CHECK(lambada_error(R"({"text": "   "})").find(path + ":2: LAMBADA text \"   \" has no last word") == 0);
  CHECK(lambada_error(R"({"text": "word"})") ==
        path + ":2: LAMBADA text \"word\" has no context before its last word");

  const std::string good = R"({"context": "Q", "choices": ["a", "b"], "gold": 0})";
  auto choice_error = [&](const std::string& task, const std::string& record) {
    std::string file = write_temp("degenerate.jsonl", good + "\n" + record + "\n");
    return error_of([&] { read_multiple_choice(task, file); });
  };
  CHECK(choice_error("piqa", R"({"context": " ", "choices": ["a", "b"], "gold": 0})") ==
        path + ":2: the context is empty");
  CHECK(choice_error("piqa", R"({"context": "Q", "choices": ["a", ""], "gold": 0})") ==
        path + ":2: choice 1 is empty");
  CHECK(choice_error("piqa", R"({"context": "Q", "choices": ["a"], "gold": 0})") ==
        path + ":2: a multiple-choice record needs at least 2 choices, got 1");
  CHECK(choice_error("piqa", R"({"context": "Q", "choices": ["a", "b"], "gold": 4294967297})")
            .find(path + ":2: field \"gold\" must be an integer label, got 4294967297") == 0);
  CHECK(choice_error("piqa", R"({"context": "Q", "choices": ["a", "b"], "gold": -1})") ==
        path + ":2: gold index -1 is outside the 2 choices");
  CHECK(choice_error("arc_easy", R"({"question": "Q", "choices": {"text": [], "label": []}, "answerKey": "A"})")
            .find(path + ":2: answerKey \"A\" is not one of choices.label []") == 0);
}

TEST_CASE("eval: task JSONL nesting is bounded and errors quote an excerpt of a value") {
  std::string path = write_temp("deep.jsonl", "{\"text\": " + std::string(100000, '[') + std::string(100000, ']') + "}\n");
  CHECK(error_of([&] { read_lambada(path); }) == path + ":1: JSON nested deeper than 64 levels");
  path = write_temp("huge.jsonl", "{\"text\": [\"" + std::string(100000, 'x') + "\"]}\n");
  std::string err = error_of([&] { read_lambada(path); });
  // The value is quoted as its first 100 characters and "...": [" then 98 x's.
  const std::string excerpt = "[\"" + std::string(98, 'x') + "...";
  CHECK(err == path + ":1: field \"text\" must be a string, got " + excerpt);
  CHECK(err.size() < 300);
}
