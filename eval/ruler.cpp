// The RULER task table (RULER scripts/synthetic.yaml), sample generation dispatch, scoring
// (scripts/eval/synthetic/constants.py) and the run over tasks and lengths.
#include "eval/ruler.h"

#include <chrono>
#include <cmath>
#include <iostream>

#include "eval/results_log.h"
#include "eval/ruler_detail.h"
#include "eval/text_util.h"
#include "tensor/error.h"

namespace hla::eval {

const std::vector<RulerTask>& ruler_tasks() {
  using K = RulerTask::Kind;
  auto other = [](std::string name, K kind, int tokens_to_generate) {
    RulerTask t;
    t.name = std::move(name);
    t.kind = kind;
    t.tokens_to_generate = tokens_to_generate;
    return t;
  };
  auto niah = [&](std::string name, std::string haystack, std::string key, std::string value,
                 int k, int v, int q) {
    RulerTask t = other(std::move(name), K::Niah, 128);
    t.haystack = std::move(haystack);
    t.key_type = std::move(key);
    t.value_type = std::move(value);
    t.num_keys = k;
    t.num_values = v;
    t.num_queries = q;
    return t;
  };
  static const std::vector<RulerTask> tasks = {
      niah("niah_single_1", "noise", "words", "numbers", 1, 1, 1),
      niah("niah_single_2", "essay", "words", "numbers", 1, 1, 1),
      niah("niah_single_3", "essay", "words", "uuids", 1, 1, 1),
      niah("niah_multikey_1", "essay", "words", "numbers", 4, 1, 1),
      niah("niah_multikey_2", "needle", "words", "numbers", 1, 1, 1),
      niah("niah_multikey_3", "needle", "uuids", "uuids", 1, 1, 1),
      niah("niah_multivalue", "essay", "words", "numbers", 1, 4, 1),
      niah("niah_multiquery", "essay", "words", "numbers", 1, 1, 4),
      other("vt", K::VariableTracking, 30),
      other("cwe", K::CommonWords, 120),
      other("fwe", K::FrequentWords, 50),
      other("qa_1", K::QaSingleHop, 32),
      other("qa_2", K::QaTwoHop, 32),
  };
  return tasks;
}

const RulerTask* find_ruler_task(const std::string& name) {
  for (const RulerTask& t : ruler_tasks())
    if (t.name == name) return &t;
  return nullptr;
}

int generation_budget(const RulerTask& task, double token_scale) {
  return std::max(1, static_cast<int>(std::lround(task.tokens_to_generate * token_scale)));
}

namespace {

uint64_t name_hash(const std::string& name) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

std::vector<RulerSample> generate_ruler_samples(const RulerTask& task,
                                                const RulerGenOptions& options,
                                                const RulerResources& resources,
                                                const TokenCounter& count_tokens) {
  HLA_CHECK_INPUT(options.samples >= 1, "RULER needs at least one sample, got ", options.samples);
  Rng rng(options.seed ^ name_hash(task.name) ^ (static_cast<uint64_t>(options.length) << 32));
  using K = RulerTask::Kind;
  switch (task.kind) {
    case K::Niah: return ruler::generate_niah(task, options, resources, count_tokens, rng);
    case K::VariableTracking:
      return ruler::generate_variable_tracking(task, options, count_tokens, rng);
    case K::CommonWords:
      return ruler::generate_common_words(task, options, resources, count_tokens, rng);
    case K::FrequentWords: return ruler::generate_frequent_words(task, options, count_tokens, rng);
    case K::QaSingleHop:
    case K::QaTwoHop: return ruler::generate_qa(task, options, count_tokens, rng);
  }
  fail("unknown RULER task kind");
}

std::string ruler_postprocess(const std::string& prediction) {
  std::string p = strip(prediction);
  for (char& c : p)
    if (static_cast<unsigned char>(c) < 0x20) c = '\n';
  return strip(p);
}

namespace {

double round2(double x) { return std::round(x * 100.0) / 100.0; }

// Per sample: the fraction of references found (all) or whether any is found (part).
double string_match(const std::vector<std::string>& predictions,
                    const std::vector<std::vector<std::string>>& references, bool any) {
  HLA_CHECK(predictions.size() == references.size() && !predictions.empty(),
            "string match needs one reference list per prediction");
  double total = 0;
  for (size_t i = 0; i < predictions.size(); i++) {
    const std::string pred = to_lower_ascii(predictions[i]);
    double found = 0;
    for (const std::string& r : references[i])
      found += pred.find(to_lower_ascii(r)) != std::string::npos ? 1.0 : 0.0;
    total += any ? (found > 0 ? 1.0 : 0.0) : found / static_cast<double>(references[i].size());
  }
  return round2(total / static_cast<double>(predictions.size()) * 100.0);
}

}  // namespace

double string_match_all(const std::vector<std::string>& predictions,
                        const std::vector<std::vector<std::string>>& references) {
  return string_match(predictions, references, false);
}

double string_match_part(const std::vector<std::string>& predictions,
                         const std::vector<std::vector<std::string>>& references) {
  return string_match(predictions, references, true);
}

bool is_qa_task(const RulerTask& task) {
  return task.kind == RulerTask::Kind::QaSingleHop || task.kind == RulerTask::Kind::QaTwoHop;
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

nlohmann::json run_task_at_length(LanguageModel& model, const data::Tokenizer& tokenizer,
                                  const RulerTask& task, const RulerResources& resources,
                                  const RulerRunOptions& options, int64_t length) {
  auto start = std::chrono::steady_clock::now();
  std::vector<std::string> notes;
  RulerGenOptions gen{length, options.samples, options.seed, options.token_scale, &notes};
  TokenCounter count_tokens = [&](const std::string& text) {
    return static_cast<int64_t>(tokenizer.encode(text).size());
  };
  std::vector<RulerSample> samples = generate_ruler_samples(task, gen, resources, count_tokens);
  std::vector<GenerateRequest> requests;
  int64_t total_length = 0;
  for (const RulerSample& s : samples) {
    requests.push_back({tokenizer.encode(s.input + s.answer_prefix), generation_budget(task, options.token_scale),
                        {tokenizer.eos_id()}, tokenizer.vocab_size()});
    total_length += s.length;
  }
  const double samples_seconds = seconds_since(start);
  BatchOptions batch = options.batch;
  batch.label = task.name + "@" + std::to_string(length);
  const GenerateTimes before = model.generate_times();
  std::vector<std::vector<int32_t>> outputs = generate_in_batches(model, requests, batch);
  const GenerateTimes after = model.generate_times();
  std::vector<std::string> predictions;
  std::vector<std::vector<std::string>> references;
  for (size_t i = 0; i < samples.size(); i++) {
    predictions.push_back(ruler_postprocess(tokenizer.decode(outputs[i])));
    references.push_back(samples[i].outputs);
  }
  const bool part = is_qa_task(task);  // RULER scores QA by string_match_part
  double score = part ? string_match_part(predictions, references)
                      : string_match_all(predictions, references);
  const std::string& prompt = samples[0].input;
  nlohmann::json result = {{"score", score},
          {"metric", part ? "string_match_part" : "string_match_all"},
          {"n", samples.size()},
          {"mean_length", static_cast<double>(total_length) / samples.size()},
          {"seconds", seconds_since(start)},
          {"seconds_samples", samples_seconds},  // generating and tokenizing the samples
          {"seconds_prefill", after.prefill_seconds - before.prefill_seconds},
          {"seconds_steps", after.step_seconds - before.step_seconds},
          {"example",  // model output and haystack text: any bytes, made valid UTF-8
           valid_utf8_json({{"prompt_tail", prompt.substr(prompt.size() > 300 ? prompt.size() - 300 : 0) +
                                                samples[0].answer_prefix},
                            {"prediction", predictions[0]},
                            {"references", references[0]}})}};
  if (!notes.empty()) result["notes"] = notes;  // where the generator departed from RULER's setting
  return result;
}

// The notes for lengths beyond the model's training context (an error beyond a position limit).
std::vector<std::string> length_notes(const LanguageModel& model, const std::vector<int64_t>& lengths) {
  std::vector<std::string> notes;
  for (int64_t length : lengths) {
    if (model.position_limit() > 0 && length > model.position_limit())
      fail("RULER length ", length, " is longer than the model's position limit of ",
           model.position_limit(), " tokens");
    if (length > model.max_length()) {
      notes.push_back("length " + std::to_string(length) + " is beyond the model's context of " +
                      std::to_string(model.max_length()) +
                      " tokens (training seq_len or --max-length): it runs because the model has no "
                      "position limit, and measures length extrapolation");
      std::cerr << "warning: RULER " << notes.back() << "\n";
    }
  }
  return notes;
}

// "average", "average_without_qa" and "averaged_tasks" at `key` over the tasks scored so far.
void update_averages(nlohmann::json& result, const std::vector<const RulerTask*>& tasks, const std::string& key) {
  double sum = 0, sum_without_qa = 0;
  int scored = 0, scored_without_qa = 0;
  const nlohmann::json& scores = result["tasks"];
  for (const RulerTask* task : tasks) {
    if (!scores.contains(task->name)) continue;
    const nlohmann::json& by_length = scores[task->name];
    if (!by_length.contains(key) || is_task_error(by_length[key])) continue;
    const double score = by_length[key]["score"].get<double>();
    sum += score;
    scored++;
    if (!is_qa_task(*task)) sum_without_qa += score, scored_without_qa++;
  }
  auto mean = [](double total, int n) { return n > 0 ? nlohmann::json(round2(total / n)) : nlohmann::json(); };
  result["average"][key] = mean(sum, scored);
  result["average_without_qa"][key] = mean(sum_without_qa, scored_without_qa);
  result["averaged_tasks"][key] = {{"all", scored}, {"without_qa", scored_without_qa}};
}

}  // namespace

nlohmann::json run_ruler(LanguageModel& model, const data::Tokenizer& tokenizer,
                         const std::vector<std::string>& task_names,
                         const RulerResources& resources, const RulerRunOptions& options) {
  std::vector<const RulerTask*> tasks;
  for (const std::string& name : task_names) {
    const RulerTask* task = find_ruler_task(name);
    if (!task) fail("unknown RULER task \"", name, "\"");
    tasks.push_back(task);
  }
  std::vector<std::string> notes = resources.notes;
  for (const std::string& note : length_notes(model, options.lengths)) notes.push_back(note);
  nlohmann::json result = {{"lengths", options.lengths}, {"samples", options.samples},
                           {"seed", options.seed},       {"token_scale", options.token_scale},
                           {"notes", notes},             {"tasks", nlohmann::json::object()}};
  for (int64_t length : options.lengths) {
    const std::string key = std::to_string(length);
    for (const RulerTask* task : tasks) {
      result["tasks"][task->name][key] = result_or_error("RULER " + task->name + "@" + key, [&] {
        return run_task_at_length(model, tokenizer, *task, resources, options, length);
      });
      update_averages(result, tasks, key);
      if (options.on_task_done) options.on_task_done(result);
    }
  }
  return result;
}

}  // namespace hla::eval
