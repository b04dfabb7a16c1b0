// The RULER timing bench (see ruler_bench.h).
#include "eval/ruler_bench.h"

#include <cstdio>
#include <ostream>

#include "autograd/var.h"
#include "data/bpe.h"
#include "eval/hybrid_model.h"
#include "eval/ruler.h"
#include "nn/model.h"
#include "tensor/error.h"

namespace hla::eval {

RulerBench run_ruler_bench(const RulerBenchOptions& o, std::ostream* log) {
  HLA_CHECK_INPUT(o.samples >= 1 && o.batch_size >= 1 && o.length >= 1,
                  "hla bench ruler: --samples, --batch-size and --length must be >= 1");
  DecodeBenchOptions shape = o.shape;
  shape.hybrids = {o.hybrid};
  std::string source;
  const ModelConfig config = decode_bench_configs(shape, &source).at(0).second;
  std::unique_ptr<TrainableModel> built = make_model(config, 1, shape.device, shape.dtype);
  std::unique_ptr<LanguageModel> model =
      wrap_hybrid_model(std::move(built), static_cast<int>(o.length), "random init from " + source);
  std::unique_ptr<data::Tokenizer> tokenizer = data::load_tokenizer(o.tokenizer);

  RulerBench bench;
  bench.model = model->describe();
  std::vector<std::string> tasks = o.tasks;
  for (const RulerTask& t : ruler_tasks()) {
    if (!o.tasks.empty()) break;
    if (t.haystack == "essay" && o.haystack.empty())
      bench.notes.push_back("skipped " + t.name + ": no --haystack FILE");
    else tasks.push_back(t.name);
  }
  RulerResources resources = load_ruler_resources(o.haystack, o.words, o.seed);
  bench.notes.insert(bench.notes.end(), resources.notes.begin(), resources.notes.end());
  RulerRunOptions run;
  run.lengths = {o.length};
  run.samples = o.samples;
  run.seed = o.seed;
  run.token_scale = o.token_scale > 0 ? o.token_scale : (tokenizer->name() == "byte" ? 4.0 : 1.0);
  run.batch.batch_size = o.batch_size;
  run.batch.show_progress = false;
  const std::string key = std::to_string(o.length);
  size_t reported = 0;
  run.on_task_done = [&](const nlohmann::json& so_far) {
    for (; reported < tasks.size() && so_far["tasks"].contains(tasks[reported]); reported++) {
      const nlohmann::json& r = so_far["tasks"][tasks[reported]][key];
      RulerBenchRow row;
      row.task = tasks[reported];
      if (r.contains("error")) {
        row.error = r["error"].get<std::string>();
      } else {
        row.samples = r["n"].get<int64_t>();
        row.mean_length = r["mean_length"].get<double>();
        row.seconds = r["seconds"].get<double>();
        row.samples_seconds = r["seconds_samples"].get<double>();
        row.prefill_seconds = r["seconds_prefill"].get<double>();
        row.steps_seconds = r["seconds_steps"].get<double>();
      }
      if (log)
        *log << "ruler bench: " << row.task << " " << (row.error.empty() ? "" : "failed ") << row.seconds << " s\n";
      bench.rows.push_back(row);
    }
  };
  NoGradGuard no_grad;
  run_ruler(*model, *tokenizer, tasks, resources, run);
  return bench;
}

std::string ruler_bench_table(const RulerBench& bench) {
  std::string out = bench.model + "\n";
  for (const std::string& note : bench.notes) out += "note: " + note + "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-16s %5s %9s %9s %9s %9s %9s %9s\n", "task", "n", "tokens", "samples s",
                "prefill s", "steps s", "other s", "total s");
  out += line;
  RulerBenchRow total;
  total.task = "total";
  auto print = [&](const RulerBenchRow& r) {
    const double other = r.seconds - r.samples_seconds - r.prefill_seconds - r.steps_seconds;
    std::snprintf(line, sizeof line, "%-16s %5lld %9.0f %9.2f %9.2f %9.2f %9.2f %9.2f\n", r.task.c_str(),
                  static_cast<long long>(r.samples), r.mean_length, r.samples_seconds, r.prefill_seconds,
                  r.steps_seconds, other, r.seconds);
    out += line;
  };
  for (const RulerBenchRow& r : bench.rows) {
    if (!r.error.empty()) {
      out += r.task + " failed: " + r.error + "\n";
      continue;
    }
    print(r);
    total.samples += r.samples;
    total.mean_length += r.mean_length * static_cast<double>(r.samples);
    total.seconds += r.seconds;
    total.samples_seconds += r.samples_seconds;
    total.prefill_seconds += r.prefill_seconds;
    total.steps_seconds += r.steps_seconds;
  }
  if (total.samples > 0) total.mean_length /= static_cast<double>(total.samples);
  print(total);
  return out;
}

}  // namespace hla::eval
