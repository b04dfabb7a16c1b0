// `hla eval`: zero-shot LM tasks, the RULER-style suite, MQAR and held-out perplexity on a
// checkpoint (or on an n-gram baseline trained on the spot), written as results.json and
// report.md. The reports are rewritten after every task (eval/results_log.h), so an interrupted
// run keeps what it did, and a task that fails is recorded and the others still run.
//
//   hla eval --checkpoint runs/x --tasks arc_easy,piqa,lambada,ruler --data-dir data/eval
//   hla eval --ngram train.jsonl.zst --out eval/ngram --tasks lambada --data-dir data/eval
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "data/bpe.h"
#include "eval/lm_eval.h"
#include "eval/model_adapter.h"
#include "eval/mqar_eval.h"
#include "eval/ngram_model.h"
#include "eval/perplexity.h"
#include "eval/report.h"
#include "eval/results_log.h"
#include "eval/ruler.h"
#include "eval/text_util.h"
#include "tensor/error.h"

namespace {

using namespace hla::eval;
using nlohmann::json;

const char* const kAllTasks = "arc_easy,arc_challenge,hellaswag,piqa,openbookqa,lambada,ruler,mqar,ppl";

struct EvalSettings {
  std::string checkpoint, ngram_text, tokenizer, tasks = kAllTasks, data_dir, device = "cpu", dtype = "f32", out;
  int ngram_order = 5;
  int64_t ngram_docs = -1, limit = -1;
  int batch_size = 16;
  int max_length = 0;  // 0: the training seq_len from the checkpoint, else 2048
  bool no_progress = false;
  bool tasks_given = false;  // --tasks on the command line: a task that cannot run is an error
  // RULER
  std::vector<int64_t> lengths;  // empty: min(4096, the model's context)
  int samples = 25;
  uint64_t seed = 42;
  std::string haystack, words;
  double token_scale = 0;  // 0: 4 for the byte tokenizer, else 1
  // MQAR
  std::string mqar_grid = "64x4,128x8,256x16,512x64";
  bool mqar_grid_given = false;  // else an MQAR-trained checkpoint's own cell is added
  int64_t mqar_examples = 256, mqar_vocab = 0;
  // perplexity
  std::string ppl_file;
  int64_t ppl_docs = -1;
};

// The --tasks list, split into LM tasks, RULER tasks ("ruler" = all 13), mqar and ppl.
struct TaskPlan {
  std::vector<const LmTaskInfo*> lm;
  std::vector<std::string> ruler;
  std::vector<std::string> ruler_named;  // RULER tasks named one by one (not through "ruler")
  std::vector<std::string> ruler_notes;  // RULER tasks skipped, for the report
  bool mqar = false, ppl = false;
  // MQAR reads token ids directly; every other task tokenises text
  bool uses_tokenizer() const { return !lm.empty() || !ruler.empty() || ppl; }
};

TaskPlan plan_tasks(const std::string& spec) {
  TaskPlan plan;
  for (const std::string& raw : split_on(spec, ',')) {
    const std::string name = strip(raw);
    if (const LmTaskInfo* task = find_lm_task(name)) {
      plan.lm.push_back(task);
    } else if (name == "ruler") {
      for (const RulerTask& t : ruler_tasks()) plan.ruler.push_back(t.name);
    } else if (find_ruler_task(name)) {
      plan.ruler.push_back(name);
      plan.ruler_named.push_back(name);
    } else if (name == "mqar") {
      plan.mqar = true;
    } else if (name == "ppl") {
      plan.ppl = true;
    } else {
      hla::fail("--tasks: unknown task \"", name, "\" (known: ", kAllTasks,
                ", or single RULER tasks such as niah_single_1)");
    }
  }
  return plan;
}

EvalModel build_model(const EvalSettings& s, const TaskPlan& plan) {
  if (s.checkpoint.empty() == s.ngram_text.empty())
    hla::fail("give exactly one of --checkpoint DIR and --ngram FILE");
  if (!s.checkpoint.empty())
    return load_model_for_eval(s.checkpoint, s.device,
                               {s.tokenizer, s.max_length, plan.uses_tokenizer(),
                                s.dtype == "bf16" ? hla::DType::BF16 : hla::DType::F32});
  EvalModel m;
  m.tokenizer = hla::data::load_tokenizer(s.tokenizer.empty() ? "byte" : s.tokenizer);
  std::cerr << "training an order-" << s.ngram_order << " n-gram on " << s.ngram_text << "\n";
  m.model = train_ngram(s.ngram_text, *m.tokenizer, s.ngram_order, s.ngram_docs);
  return m;
}

std::string output_dir(const EvalSettings& s) {
  if (!s.out.empty()) return s.out;
  if (!s.checkpoint.empty()) return s.checkpoint;
  hla::fail("--out DIR is needed with --ngram (there is no checkpoint directory to write to)");
}

// The row label of the report: the run directory ("runs/x/checkpoint" -> "x") or "ngram-5".
std::string run_name(const EvalSettings& s) {
  if (s.checkpoint.empty()) return "ngram-" + std::to_string(s.ngram_order);
  std::filesystem::path dir = std::filesystem::path(s.checkpoint).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  if (dir.filename() == "checkpoint" && dir.has_parent_path()) dir = dir.parent_path();
  return dir.filename().string();
}

json settings_json(const EvalSettings& s, double token_scale) {
  return {{"checkpoint", s.checkpoint}, {"ngram_text", s.ngram_text},
          {"ngram_order", s.ngram_order}, {"tasks", s.tasks},
          {"data_dir", s.data_dir},     {"limit", s.limit},
          {"device", s.device},         {"dtype", s.dtype},
          {"batch_size", s.batch_size},
          {"max_length", s.max_length},
          {"ruler_samples", s.samples},
          {"seed", s.seed},             {"token_scale", token_scale},
          {"haystack", s.haystack},     {"words", s.words},
          {"mqar_grid", s.mqar_grid},   {"mqar_examples", s.mqar_examples},
          {"ppl_file", s.ppl_file}};
}

// With the default task list, tasks whose inputs are missing are skipped with a warning; a task
// named in --tasks must run.
void drop_tasks_without_inputs(const EvalSettings& s, TaskPlan& plan) {
  auto skip = [&](const std::string& task, const std::string& why) {
    if (s.tasks_given) hla::fail("task ", task, ": ", why);
    std::cerr << "warning: skipping " << task << ": " << why << "\n";
  };
  std::vector<const LmTaskInfo*> kept;
  for (const LmTaskInfo* task : plan.lm) {
    if (s.data_dir.empty()) {
      skip(task->name, "no --data-dir (the directory of arc_easy.jsonl, piqa.jsonl, ...)");
    } else if (!std::filesystem::exists(std::filesystem::path(s.data_dir) / task->file_name)) {
      skip(task->name, (std::filesystem::path(s.data_dir) / task->file_name).string() + " does not exist");
    } else {
      kept.push_back(task);
    }
  }
  plan.lm = kept;
  // RULER's essay tasks without an essay haystack: skipped (named one by one: an error), never
  // run on the noise haystack under their name.
  if (s.haystack.empty()) {
    std::vector<std::string> kept_ruler, skipped;
    for (const std::string& name : plan.ruler) {
      const bool named = std::count(plan.ruler_named.begin(), plan.ruler_named.end(), name) > 0;
      if (find_ruler_task(name)->haystack != "essay") kept_ruler.push_back(name);
      else if (named) hla::fail("task ", name, ": it needs the essay haystack; give --haystack FILE");
      else skipped.push_back(name);
    }
    if (!skipped.empty()) {
      plan.ruler_notes.push_back("skipped the essay-haystack tasks " + join(skipped, ", ") +
                                 ": no --haystack FILE (RULER's essays); the other RULER tasks ran");
      std::cerr << "warning: " << plan.ruler_notes.back() << "\n";
    }
    plan.ruler = kept_ruler;
  }
  if (plan.ppl && s.ppl_file.empty()) {
    skip("ppl", "no --ppl-file (held-out text .txt/.jsonl[.zst] or shards .bin[.zst])");
    plan.ppl = false;
  }
}

void run_eval(const EvalSettings& s) {
  TaskPlan plan = plan_tasks(s.tasks);
  drop_tasks_without_inputs(s, plan);
  const std::string out = output_dir(s);
  EvalModel m = build_model(s, plan);
  const double token_scale = s.token_scale > 0 ? s.token_scale : (m.tokenizer->name() == "byte" ? 4.0 : 1.0);
  const std::vector<int64_t> lengths =
      s.lengths.empty() ? std::vector<int64_t>{std::min(4096, m.model->max_length())} : s.lengths;

  BatchOptions batch;
  batch.batch_size = s.batch_size;
  batch.show_progress = !s.no_progress;
  ResultsLog log({{"name", run_name(s)},
                  {"model", m.model->describe()},
                  {"tokenizer", m.tokenizer->name()},
                  {"settings", settings_json(s, token_scale)},
                  {"lm_tasks", json::object()}},
                 out);

  for (const LmTaskInfo* task : plan.lm) {
    log.run("/lm_tasks/" + task->name,
            [&] { return run_lm_task(*task, s.data_dir, *m.model, *m.tokenizer, {s.limit, batch}); });
  }
  if (!plan.ruler.empty()) {
    log.run("/ruler", [&] {
      RulerResources resources = load_ruler_resources(s.haystack, s.words, s.seed);
      resources.notes.insert(resources.notes.begin(), plan.ruler_notes.begin(), plan.ruler_notes.end());
      RulerRunOptions options{lengths, s.samples, s.seed, token_scale, batch,
                              [&](const json& so_far) { log.set("/ruler", so_far); }};
      return run_ruler(*m.model, *m.tokenizer, plan.ruler, resources, options);
    });
  }
  if (plan.mqar) {
    log.run("/mqar", [&] {
      MqarEvalOptions options;
      options.grid = parse_mqar_grid(s.mqar_grid);
      options.examples = s.mqar_examples;
      options.vocab_size = s.mqar_vocab;
      options.batch = batch;
      use_training_mqar(m.training, !s.mqar_grid_given, options);
      return run_mqar(*m.model, options);
    });
  }
  if (plan.ppl) {
    log.run("/ppl", [&] { return run_perplexity(*m.model, *m.tokenizer, s.ppl_file, {s.ppl_docs, 0, batch}); });
  }
  std::cout << render_report_markdown(log.results());
  std::cerr << "wrote " << out << "/results.json and " << out << "/report.md\n";
  if (log.failures() > 0) {
    std::cerr << "error: " << log.failures() << " task(s) failed; see \"Failed tasks\" in " << out << "/report.md\n";
    throw hla::cli::ExitCode{1};
  }
}

void setup(CLI::App& cmd) {
  auto s = std::make_shared<EvalSettings>();
  cmd.option_defaults()->always_capture_default();
  cmd.add_option("--checkpoint", s->checkpoint, "checkpoint directory written by hla train");
  cmd.add_option("--ngram", s->ngram_text,
                 "instead of a checkpoint, train an n-gram baseline on this corpus (.txt, .jsonl[.zst])");
  cmd.add_option("--ngram-order", s->ngram_order, "n-gram order")->check(CLI::Range(1, 8));
  cmd.add_option("--ngram-docs", s->ngram_docs, "train the n-gram on the first N documents (-1: all)");
  cmd.add_option("--tokenizer", s->tokenizer,
                 "byte or a tokenizer.json (default: the checkpoint's; byte for --ngram)");
  CLI::Option* tasks = cmd.add_option(
      "--tasks", s->tasks, std::string("comma-separated: ") + kAllTasks +
                               ", or single RULER tasks (niah_single_1, vt, ...); by default "
                               "tasks whose data is missing are skipped");
  cmd.add_option("--data-dir", s->data_dir,
                 "directory of the LM task files (arc_easy.jsonl, lambada_openai.jsonl, ...)");
  cmd.add_option("--limit", s->limit, "evaluate only the first N documents of each LM task");
  cmd.add_option("--device", s->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd.add_option("--dtype", s->dtype, "compute dtype: f32, or bf16 (cuda)")->check(CLI::IsMember({"f32", "bf16"}));
  cmd.add_option("--out", s->out, "output directory (default: the checkpoint directory)");
  cmd.add_option("--batch-size", s->batch_size, "requests per model call")->check(CLI::PositiveNumber);
  cmd.add_option("--max-length", s->max_length,
                 "the model's context in tokens: LM requests are truncated to it, longer RULER/MQAR "
                 "lengths warn (0: the checkpoint's training seq_len, else 2048)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_flag("--no-progress", s->no_progress, "no progress bars");
  cmd.add_option("--length", s->lengths,
                 "RULER lengths in model tokens, comma-separated (default min(4096, context))")
      ->delimiter(',');
  cmd.add_option("--samples", s->samples, "RULER samples per task and length")->check(CLI::PositiveNumber);
  cmd.add_option("--seed", s->seed, "RULER seed");
  cmd.add_option("--haystack", s->haystack, "RULER essay haystack text (e.g. ruler/essays.txt); "
                                            "without it the 5 essay-haystack tasks are skipped");
  cmd.add_option("--words", s->words, "RULER word list file, or a directory with adjectives.txt, "
                                      "nouns.txt, verbs.txt (default /usr/share/dict/words)");
  cmd.add_option("--token-scale", s->token_scale,
                 "multiplies RULER's token counts (generation budgets...); default 4 for the byte "
                 "tokenizer, else 1");
  CLI::Option* mqar_grid = cmd.add_option(
      "--mqar-grid", s->mqar_grid,
      "MQAR cells LENGTHxPAIRS, comma-separated (by default an MQAR-trained checkpoint's own cell "
      "is added)");
  cmd.add_option("--mqar-examples", s->mqar_examples, "MQAR examples per cell");
  cmd.add_option("--mqar-vocab", s->mqar_vocab, "MQAR vocabulary (0: the model's, at most 8192)");
  cmd.add_option("--ppl-file", s->ppl_file, "held-out text (.txt, .jsonl[.zst]) or shard (.bin[.zst])");
  cmd.add_option("--ppl-docs", s->ppl_docs, "score only the first N documents (-1: all)");
  cmd.callback([s, tasks, mqar_grid] {
    s->tasks_given = tasks->count() > 0;
    s->mqar_grid_given = mqar_grid->count() > 0;
    run_eval(*s);
  });
}

const bool registered = hla::cli::register_command(
    "eval", "Evaluate a checkpoint: LM tasks, RULER, MQAR, perplexity -> results.json, report.md",
    setup);

}  // namespace
