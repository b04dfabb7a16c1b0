// results.json survives any model output and any failing task: invalid UTF-8 becomes U+FFFD
// (never nlohmann's type_error 316), every task is on disk as soon as it finishes, and a task
// that throws is recorded while the others run. RULER: the averages with and without the QA
// tasks, lengths beyond the training context, essay tasks without a haystack, and vt at the
// byte tokenizer's short default lengths.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <stdexcept>

#include "data/unicode.h"
#include "eval/report.h"
#include "eval/results_log.h"
#include "eval/ruler.h"
#include "eval/text_util.h"
#include "tensor/error.h"
#include "tests/test_data_util.h"
#include "tests/test_eval_util.h"

using namespace hla::eval;
using namespace hla::eval::testing;
using hla::data::testing::ScratchDir;
using nlohmann::json;

namespace {

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

RulerResources word_resources() {
  RulerResources r;
  r.key_adjectives = {"lively", "quiet", "brave"};
  r.key_nouns = {"apple", "river", "stone"};
  for (int i = 0; i < 2000; i++) r.common_words.push_back("word" + std::to_string(i));
  return r;
}

RulerRunOptions quiet_options(std::vector<int64_t> lengths, int samples) {
  RulerRunOptions options;
  options.lengths = std::move(lengths);
  options.samples = samples;
  options.token_scale = 1.0;
  options.batch.show_progress = false;
  return options;
}

// Generates whatever `reply` says for each prompt (decoded with the test byte tokenizer).
class ScriptedModel : public FunctionModel {
 public:
  explicit ScriptedModel(std::function<std::vector<int32_t>(const std::string& prompt)> reply, int max_length = 1 << 16,
                         int position_limit = 0)
      : FunctionModel([](const std::vector<int32_t>&, int32_t) { return 0.0; }, max_length, 258, position_limit),
        reply_(std::move(reply)) {}
  std::vector<std::vector<int32_t>> generate(const std::vector<GenerateRequest>& batch) override {
    std::vector<std::vector<int32_t>> out;
    for (const GenerateRequest& r : batch) out.push_back(reply_(TestByteTokenizer().decode(r.context)));
    return out;
  }

 private:
  std::function<std::vector<int32_t>(const std::string&)> reply_;
};

}  // namespace

TEST_CASE("eval: valid_utf8 replaces every invalid byte with U+FFFD and keeps valid text") {
  const std::string valid = "plain, \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";  // e-acute, euro, an emoji
  CHECK(hla::data::valid_utf8(valid) == valid);
  const std::string& R = kReplacement;
  CHECK(hla::data::valid_utf8("a\xFF" "b") == "a" + R + "b");
  CHECK(hla::data::valid_utf8("\x80x") == R + "x");                  // a lone continuation byte
  CHECK(hla::data::valid_utf8("x\xE2\x82") == "x" + R + R);          // a truncated euro sign
  CHECK(hla::data::valid_utf8("\xC0\xAF") == R + R);                 // overlong '/'
  CHECK(hla::data::valid_utf8("\xED\xA0\x80") == R + R + R);         // a surrogate
  CHECK(hla::data::valid_utf8("\xF4\x90\x80\x80") == R + R + R + R); // above U+10FFFF
}

TEST_CASE("eval: results with invalid UTF-8 are written valid (the type_error 316 crash)") {
  json results = {{"name", "run\xFF"}, {"model", "m"}, {"tokenizer", "byte"}, {"lm_tasks", json::object()},
                  {"bytes\xC3", {"\xE2\x82", 1}}};
  CHECK_THROWS_AS((void)results.dump(), json::type_error);  // what lost every result before
  ScratchDir dir("eval-utf8");
  write_reports(results, dir.path.string());
  const json written = json::parse(slurp(dir / "results.json"));
  CHECK(written["name"] == "run" + kReplacement);
  CHECK(written["bytes" + kReplacement] == json::array({kReplacement + kReplacement, 1}));
  CHECK(slurp(dir / "report.md").rfind("# Evaluation: run" + kReplacement + "\n", 0) == 0);
}

TEST_CASE("eval: a RULER prediction of invalid bytes is stored as valid UTF-8") {
  ScriptedModel garbage([](const std::string&) { return std::vector<int32_t>{0xFF, 'a', 0xC3}; });
  TestByteTokenizer tok;
  json result = run_ruler(garbage, tok, {"niah_single_1"}, word_resources(), quiet_options({1500}, 2));
  CHECK(result["tasks"]["niah_single_1"]["1500"]["example"]["prediction"] == kReplacement + "a" + kReplacement);
  CHECK(result["tasks"]["niah_single_1"]["1500"]["score"] == 0.0);
  CHECK_NOTHROW((void)result.dump());
}

TEST_CASE("eval: every task is on disk when the next starts; a failing task is recorded, the others run") {
  ScratchDir dir("eval-log");
  ResultsLog log({{"name", "r"}, {"lm_tasks", json::object()}}, dir.path.string());
  auto on_disk = [&] { return json::parse(slurp(dir / "results.json")); };
  CHECK(log.run("/lm_tasks/first", [] { return json{{"n", 1}}; }));
  CHECK_FALSE(log.run("/lm_tasks/second", [&]() -> json {
    CHECK(on_disk()["lm_tasks"]["first"] == json{{"n", 1}});  // saved before the second began
    throw std::runtime_error("out of memory");
  }));
  CHECK(log.run("/lm_tasks/third", [&] {
    CHECK(on_disk()["lm_tasks"]["second"] == json{{"error", "out of memory"}});
    return json{{"n", 3}};
  }));
  CHECK(log.failures() == 1);
  const json final_results = on_disk();
  CHECK(final_results["lm_tasks"]["first"] == json{{"n", 1}});
  CHECK(final_results["lm_tasks"]["third"] == json{{"n", 3}});
  CHECK(slurp(dir / "report.md").find("## Failed tasks\n\n- `lm_tasks/second`: out of memory\n") != std::string::npos);
}

TEST_CASE("eval: RULER records a failing task, saves after each, and averages with and without QA") {
  // The model answers the QA task right (from the samples the run will generate), the needle
  // task wrong, and breaks on variable tracking.
  TestByteTokenizer tok;
  RulerRunOptions options = quiet_options({3000}, 2);
  options.token_scale = 2.0;
  std::map<std::string, std::string> qa_answers;
  for (const RulerSample& s :
       generate_ruler_samples(*find_ruler_task("qa_1"), {3000, 2, options.seed, 2.0}, word_resources(),
                              [](const std::string& t) { return static_cast<int64_t>(t.size()); }))
    qa_answers[s.input + s.answer_prefix] = " " + s.outputs[0];
  ScriptedModel model([&](const std::string& prompt) {
    if (prompt.find("Memorize and track the chain") != std::string::npos) throw std::runtime_error("model broke on vt");
    auto it = qa_answers.find(prompt);
    return tok.encode(it == qa_answers.end() ? " no idea" : it->second);
  });
  std::vector<json> saved;
  options.on_task_done = [&](const json& so_far) { saved.push_back(so_far); };
  json result = run_ruler(model, tok, {"niah_single_1", "vt", "qa_1"}, word_resources(), options);

  CHECK(result["tasks"]["niah_single_1"]["3000"]["score"] == 0.0);
  CHECK(result["tasks"]["vt"]["3000"] == json{{"error", "model broke on vt"}});
  CHECK(result["tasks"]["qa_1"]["3000"]["score"] == 100.0);
  CHECK(result["average"]["3000"] == 50.0);             // (0 + 100) / 2: the failed task is left out
  CHECK(result["average_without_qa"]["3000"] == 0.0);   // niah_single_1 alone
  CHECK(result["averaged_tasks"]["3000"] == json{{"all", 2}, {"without_qa", 1}});
  REQUIRE(saved.size() == 3);  // once per task
  CHECK(saved[0]["tasks"].size() == 1);
  CHECK(saved[1]["tasks"]["vt"]["3000"].contains("error"));
  CHECK(saved[2] == result);
}

TEST_CASE("eval: RULER beyond the training context runs with a note, beyond a position limit it fails") {
  TestByteTokenizer tok;
  ScriptedModel trained_at_1000([](const std::string&) { return std::vector<int32_t>{}; }, 1000);
  json result = run_ruler(trained_at_1000, tok, {"niah_single_1"}, word_resources(), quiet_options({1500}, 1));
  CHECK(result["notes"] == json::array({"length 1500 is beyond the model's context of 1000 tokens (training "
                                        "seq_len or --max-length): it runs because the model has no position "
                                        "limit, and measures length extrapolation"}));
  CHECK(result["tasks"]["niah_single_1"]["1500"]["n"] == 1);
  ScriptedModel limited([](const std::string&) { return std::vector<int32_t>{}; }, 1000, 1200);
  CHECK_THROWS_WITH_AS(run_ruler(limited, tok, {"niah_single_1"}, word_resources(), quiet_options({1500}, 1)),
                       "RULER length 1500 is longer than the model's position limit of 1200 tokens", hla::Error);
}

TEST_CASE("eval: an essay-haystack RULER task without a haystack is an error, never the noise haystack") {
  const std::string message =
      "RULER task niah_single_2 needs the essay haystack (--haystack FILE); without one it is skipped, never "
      "run on the noise haystack under its name";
  CHECK_THROWS_WITH_AS(generate_ruler_samples(*find_ruler_task("niah_single_2"), {1500, 1, 42, 1.0}, word_resources(),
                                              [](const std::string& t) { return static_cast<int64_t>(t.size()); }),
                       message.c_str(), hla::Error);
  int essay_tasks = 0;
  for (const RulerTask& task : ruler_tasks()) essay_tasks += task.haystack == "essay";
  CHECK(essay_tasks == 5);  // the tasks hla eval skips without --haystack
}

TEST_CASE("eval: vt fits the byte tokenizer's default lengths (token scale 4) with its one-shot example") {
  for (int64_t length : {2048, 3072, 4096}) {
    CAPTURE(length);
    std::vector<RulerSample> samples =
        generate_ruler_samples(*find_ruler_task("vt"), {length, 3, 42, 4.0}, {},
                               [](const std::string& t) { return static_cast<int64_t>(t.size()); });
    REQUIRE(samples.size() == 3);
    for (const RulerSample& s : samples) {
      CHECK(s.length == static_cast<int64_t>((s.input + s.answer_prefix).size()) + 120);  // budget 30 x 4
      CHECK(s.length <= length);
      CHECK(s.length >= length * 8 / 10);
      // the example (with its answer) and the question: two answer prefixes
      const std::string prefix = "Answer: According to the chain(s)";
      CHECK(s.input.find(prefix) != std::string::npos);
      CHECK(s.input.find(prefix) != (s.input + s.answer_prefix).rfind(prefix));
      for (const std::string& name : s.outputs) CHECK(s.input.find("VAR " + name + " = ") != std::string::npos);
    }
  }
}

TEST_CASE("eval: vt and cwe fit 4096 byte tokens at token scale 1, with a note saying how") {
  // RULER's settings are in BPE tokens: vt's one-shot example gets 500 of them and cwe's
  // long-context lists start at 4096. In bytes the smallest example is about 840 and the long
  // lists over 5000, so both adapt (and say so) instead of failing.
  auto bytes = [](const std::string& t) { return static_cast<int64_t>(t.size()); };
  for (const char* name : {"vt", "cwe"}) {
    CAPTURE(name);
    const RulerTask& task = *find_ruler_task(name);
    std::vector<std::string> notes;
    RulerGenOptions options{4096, 3, 42, 1.0, &notes};
    std::vector<RulerSample> samples = generate_ruler_samples(task, options, word_resources(), bytes);
    REQUIRE(samples.size() == 3);
    for (const RulerSample& s : samples) {
      CHECK(s.length == bytes(s.input + s.answer_prefix) + generation_budget(task, 1.0));
      CHECK(s.length <= 4096);
      CHECK(s.length >= 4096 * 8 / 10);
      for (const std::string& answer : s.outputs) CHECK(s.input.find(answer) != std::string::npos);
    }
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].rfind(std::string(name) + ": ", 0) == 0);
  }
  // At the lengths RULER's settings fit (token scale 2, length 9000) neither adapts.
  for (const char* name : {"vt", "cwe"}) {
    std::vector<std::string> notes;
    RulerGenOptions options{9000, 1, 42, 2.0, &notes};
    generate_ruler_samples(*find_ruler_task(name), options, word_resources(), bytes);
    CHECK(notes.empty());
  }
}
