// RULER generators and scoring: the singular template rewrite, golden samples for a fixed
// seed, every task's samples within (and close to) the length budget at several lengths,
// the metrics on known predictions, and a full run with a model that can read needles.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "eval/ruler.h"
#include "eval/text_util.h"
#include "tests/test_eval_util.h"

using namespace hla::eval;
using namespace hla::eval::testing;

namespace {

TokenCounter byte_counter() {
  return [](const std::string& text) { return static_cast<int64_t>(text.size()); };
}

// No files needed: a tiny essay, a fixed key list and a pool of common words.
RulerResources test_resources() {
  RulerResources r;
  r.essay_words = split_whitespace(
      "Startups grow fast. Most ideas look bad at first! Do things that do not scale? "
      "Writing clarifies thinking. \"Quoted end.\" Then more text follows here.");
  r.key_adjectives = {"lively", "quiet", "brave", "sour"};
  r.key_nouns = {"apple", "river", "stone", "cloud", "lamp"};
  for (int i = 0; i < 2000; i++) r.common_words.push_back("word" + std::to_string(i));
  return r;
}

std::vector<RulerSample> generate(const std::string& task, int64_t length, int samples,
                                  double token_scale, uint64_t seed = 42) {
  RulerGenOptions options{length, samples, seed, token_scale};
  return generate_ruler_samples(*find_ruler_task(task), options, test_resources(), byte_counter());
}

std::string repeat_lines(const std::string& line, int count) {
  std::string out;
  for (int i = 0; i < count; i++) out += line + "\n";
  return out;
}

}  // namespace

TEST_CASE("eval: RULER singular template rewrite") {
  const std::string plural =
      "Some special magic {type_needle_v} are hidden within the following text. Make sure to "
      "memorize it. I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are "
      "all the special magic {type_needle_v} for {query} mentioned in the provided text? The "
      "special magic {type_needle_v} for {query} mentioned in the provided text are";
  CHECK(niah_singular_template(plural) ==
        "A special magic {type_needle_v} is hidden within the following text. Make sure to "
        "memorize it. I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat is "
        "the special magic {type_needle_v} for {query} mentioned in the provided text? The "
        "special magic {type_needle_v} for {query} mentioned in the provided text is");
  CHECK(niah_singular_template("all answers are") == "all answer is");
}

TEST_CASE("eval: RULER niah_single_1 golden sample for seed 42") {
  std::vector<RulerSample> s = generate("niah_single_1", 1300, 1, 1.0);
  const std::string noise =
      "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
  const std::string expected =
      "A special magic number is hidden within the following text. Make sure to memorize it. I "
      "will quiz you about the number afterwards.\n" +
      repeat_lines(noise, 6) + "One of the special magic numbers for sour-stone is: 1080740.\n" +
      repeat_lines(noise, 3) +
      "What is the special magic number for sour-stone mentioned in the provided text?";
  CHECK(s[0].input == expected);
  CHECK(s[0].answer_prefix ==
        " The special magic number for sour-stone mentioned in the provided text is");
  CHECK(s[0].outputs == std::vector<std::string>{"1080740"});
  CHECK(s[0].length == static_cast<int64_t>(expected.size() + s[0].answer_prefix.size()) + 128);
}

TEST_CASE("eval: RULER multi-query, variable tracking and word tasks: golden answers") {
  std::vector<RulerSample> mq = generate("niah_multiquery", 1600, 1, 2.0);
  CHECK(mq[0].answer_prefix ==
        " The special magic numbers for quiet-apple, brave-lamp, brave-apple, and quiet-stone "
        "mentioned in the provided text are");
  CHECK(mq[0].outputs == std::vector<std::string>{"9383244", "3986071", "9349101", "3132204"});
  for (const std::string& value : mq[0].outputs)
    CHECK(mq[0].input.find(" is: " + value + ".") != std::string::npos);

  std::vector<RulerSample> vt = generate("vt", 2600, 1, 2.0);
  CHECK(vt[0].outputs == std::vector<std::string>{"REFNV", "BIKQE", "RIHAA", "KAQAW", "HKJSZ"});
  CHECK(vt[0].answer_prefix ==
        " Answer: According to the chain(s) of variable assignment in the text above, 5 "
        "variables are assigned the value 55119, they are: ");
  CHECK(vt[0].input.rfind("Memorize and track", 0) == 0);  // the one-shot example comes first
  CHECK(vt[0].input.find("VAR REFNV = 55119\n") != std::string::npos);
  CHECK(vt[0].input.find("VAR BIKQE = VAR REFNV \n") != std::string::npos);
  // the example: its prompt, two spaces, its five 3-letter answers, then a blank line
  size_t example_end = vt[0].input.find("\n\nMemorize and track");
  REQUIRE(example_end != std::string::npos);
  std::string example = vt[0].input.substr(0, example_end);
  std::vector<std::string> example_words = split_whitespace(example);
  CHECK(example.find("they are:  ") != std::string::npos);
  for (size_t i = example_words.size() - 5; i < example_words.size(); i++)
    CHECK(example_words[i].size() == 3);

  std::vector<RulerSample> cwe = generate("cwe", 2600, 1, 2.0);
  REQUIRE(cwe[0].outputs.size() == 10);
  CHECK(cwe[0].input.find("\nQuestion: What are the 10 most common words in the above list? "
                          "Answer: The top 10 words that appear most often in the list are: 1. ") !=
        std::string::npos);
  // in the main list (after the few-shot example) each common word appears 6 times, others once
  std::string main_list = cwe[0].input.substr(cwe[0].input.rfind("Memorize the ones"));
  std::vector<std::string> tokens = split_whitespace(main_list);
  auto occurrences = [&](const std::string& w) { return std::count(tokens.begin(), tokens.end(), w); };
  for (const std::string& w : cwe[0].outputs) CHECK(occurrences(w) == 6);

  std::vector<RulerSample> fwe = generate("fwe", 2600, 1, 2.0);
  REQUIRE(fwe[0].outputs.size() == 3);
  std::vector<std::string> coded = split_whitespace(fwe[0].input);
  auto count = [&](const std::string& w) { return std::count(coded.begin(), coded.end(), w); };
  // Zipf counts with alpha 2: rank k appears floor(n / (k^2 zeta(2))) times; "..." is rank 1
  CHECK(count("...") > count(fwe[0].outputs[0]));
  CHECK(count(fwe[0].outputs[0]) > count(fwe[0].outputs[1]));
  CHECK(count(fwe[0].outputs[1]) > count(fwe[0].outputs[2]));
  CHECK(count(fwe[0].outputs[0]) == count("...") / 4);
}

// Pins every task's samples byte for byte (input, answer prefix, outputs, length), so a change
// to the generators' shared code shows as a changed hash. The hashes were taken from the
// generators before their common "search size, fit, split at the answer" tail was shared.
TEST_CASE("eval: RULER samples of every task are pinned by hash (seed 42, lengths 3000 and 9000)") {
  const std::map<std::string, std::string> pinned = {
      {"niah_single_1", "e16259d9eb6570ea"},   {"niah_single_2", "3b94093a364b937b"},
      {"niah_single_3", "92940c66835e3d64"},   {"niah_multikey_1", "d25657a05f1b9a81"},
      {"niah_multikey_2", "d27fafcb9a196153"}, {"niah_multikey_3", "570a233746a55b15"},
      {"niah_multivalue", "f5b2ac19f61f64df"}, {"niah_multiquery", "930084941c6ec7a2"},
      {"vt", "4f039fd37c441761"},              {"cwe", "713fc333bb940013"},
      {"fwe", "ca2805a305d27bd7"},             {"qa_1", "931ee6541a032f3c"},
      {"qa_2", "fd685b75bc35d5cd"}};
  REQUIRE(pinned.size() == ruler_tasks().size());
  for (const RulerTask& task : ruler_tasks()) {
    CAPTURE(task.name);
    std::string bytes;
    for (int64_t length : {3000, 9000}) {  // short and long context (4096 * token_scale)
      for (const RulerSample& s : generate(task.name, length, 2, 2.0)) {
        bytes += s.input + '\x1f' + s.answer_prefix + '\x1f' + std::to_string(s.length);
        for (const std::string& output : s.outputs) bytes += '\x1f' + output;
        bytes += '\x1e';
      }
    }
    CHECK(hla::data::fnv1a_hex(bytes) == pinned.at(task.name));
  }
}

TEST_CASE("eval: RULER samples are reproducible for a seed and differ across seeds") {
  for (const char* task : {"niah_multikey_2", "qa_2"}) {
    std::vector<RulerSample> a = generate(task, 3000, 2, 2.0, 7);
    std::vector<RulerSample> b = generate(task, 3000, 2, 2.0, 7);
    std::vector<RulerSample> c = generate(task, 3000, 2, 2.0, 8);
    CHECK(a[0].input == b[0].input);
    CHECK(a[1].outputs == b[1].outputs);
    CHECK(a[0].input != c[0].input);
    CHECK(a[0].input != a[1].input);
  }
}

TEST_CASE("eval: every RULER task fills but never exceeds the length budget") {
  for (int64_t length : {3000, 6000, 9000}) {
    for (const RulerTask& task : ruler_tasks()) {
      CAPTURE(task.name);
      CAPTURE(length);
      std::vector<RulerSample> samples = generate(task.name, length, 2, 2.0);
      REQUIRE(samples.size() == 2);
      for (const RulerSample& s : samples) {
        const int64_t budget = generation_budget(task, 2.0);
        CHECK(s.length == static_cast<int64_t>((s.input + s.answer_prefix).size()) + budget);
        CHECK(s.length <= length);
        // The search fits the haystack to the token; a sample that then comes out too long
        // shrinks by one search step (RULER's rule): small steps in short contexts (below
        // 4096 * token_scale), up to 500 essay words (~3000 bytes) in long ones.
        CHECK(s.length >= (length < 4096 * 2 ? length * 8 / 10 : length - 3200));
        CHECK(!s.outputs.empty());
        for (const std::string& answer : s.outputs) CHECK(s.input.find(answer) != std::string::npos);
      }
    }
  }
}

TEST_CASE("eval: RULER post-processing and string match metrics") {
  CHECK(ruler_postprocess("  \x01" "abc\tdef \n") == "abc\ndef");
  std::vector<std::string> preds = {"The numbers are 123 and 456.", "nothing", "ABC"};
  std::vector<std::vector<std::string>> refs = {{"123", "456", "789"}, {"x"}, {"abc", "zzz"}};
  // all: (2/3 + 0 + 1/2) / 3 = 38.888.. -> 38.89; part: (1 + 0 + 1) / 3 -> 66.67
  CHECK(string_match_all(preds, refs) == 38.89);
  CHECK(string_match_part(preds, refs) == 66.67);
}

namespace {

// Answers NIAH questions by reading the needle for the asked key out of the prompt.
class NeedleReader : public FunctionModel {
 public:
  NeedleReader() : FunctionModel([](const std::vector<int32_t>&, int32_t) { return 0.0; }) {}
  std::vector<std::vector<int32_t>> generate(const std::vector<GenerateRequest>& batch) override {
    TestByteTokenizer tok;
    std::vector<std::vector<int32_t>> out;
    for (const GenerateRequest& r : batch) {
      std::string text = tok.decode(r.context);
      const std::string ask = "What is the special magic number for ";
      size_t key_start = text.rfind(ask) + ask.size();
      std::string key = text.substr(key_start, text.find(' ', key_start) - key_start);
      size_t value_start = text.find("for " + key + " is: ") + key.size() + 9;
      std::string answer = " " + text.substr(value_start, 7) + ".\n\nfiller";
      out.push_back(tok.encode(answer.substr(0, r.max_new_tokens)));
    }
    return out;
  }
};

}  // namespace

TEST_CASE("eval: a RULER run scores a model that reads needles at 100") {
  NeedleReader reader;
  TestByteTokenizer tok;
  RulerRunOptions options;
  options.lengths = {1500, 2500};
  options.samples = 3;
  options.token_scale = 1.0;
  options.batch.show_progress = false;
  nlohmann::json result =
      run_ruler(reader, tok, {"niah_single_1", "niah_single_2"}, test_resources(), options);
  CHECK(result["tasks"]["niah_single_1"]["1500"]["score"] == 100.0);
  CHECK(result["tasks"]["niah_single_2"]["2500"]["score"] == 100.0);
  CHECK(result["tasks"]["niah_single_1"]["2500"]["metric"] == "string_match_all");
  CHECK(result["average"]["1500"] == 100.0);

  FunctionModel silent([](const std::vector<int32_t>&, int32_t next) { return next == 256 ? 0.0 : -1.0; });
  nlohmann::json none = run_ruler(silent, tok, {"qa_1"}, test_resources(), options);
  CHECK(none["tasks"]["qa_1"]["1500"]["score"] == 0.0);
  CHECK(none["tasks"]["qa_1"]["1500"]["metric"] == "string_match_part");
  CHECK(none["tasks"]["qa_1"]["1500"]["example"]["prediction"] == "");
}
