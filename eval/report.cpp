// results.json and report.md (see report.h).
#include "eval/report.h"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "eval/lm_tasks.h"
#include "eval/results_log.h"
#include "eval/ruler.h"
#include "eval/svg_plot.h"
#include "tensor/atomic_file.h"
#include "tensor/error.h"

namespace hla::eval {

namespace {

using nlohmann::json;

std::string fixed(double v, int decimals = 2) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(decimals);
  os << v;
  return os.str();
}

std::string percent(double fraction) { return fixed(100 * fraction); }

std::string row(const std::vector<std::string>& cells) {
  std::string out = "|";
  for (const std::string& c : cells) out += " " + c + " |";
  return out + "\n";
}

std::string header(const std::vector<std::string>& cells) {
  std::string out = row(cells) + "|";
  for (size_t i = 0; i < cells.size(); i++) out += i == 0 ? "---|" : "---:|";
  return out + "\n";
}

// The papers' zero-shot table: perplexities (held-out text per word, as lm-eval's wikitext
// word_perplexity; LAMBADA per document), then the reported metric of every task that ran, then
// the mean of the accuracies.
std::string paper_table(const json& results) {
  std::vector<std::string> titles = {"Model"}, cells = {results.value("name", "model")};
  if (results.contains("ppl") && !is_task_error(results["ppl"])) {
    titles.push_back("Val. word ppl ↓");  // per word, like the papers' Wiki. ppl
    cells.push_back(fixed(results["ppl"]["word_perplexity"].get<double>()));
  }
  double accuracy_sum = 0;
  int accuracies = 0;
  const json& lm = results["lm_tasks"];
  for (const LmTaskInfo& task : lm_tasks()) {
    if (!lm.contains(task.name) || is_task_error(lm[task.name])) continue;
    const json& metrics = lm[task.name]["metrics"];
    if (task.format == TaskFormat::Lambada) {
      titles.push_back("LMB. ppl ↓");
      cells.push_back(fixed(metrics["perplexity"].get<double>()));
    }
    const bool norm = task.paper_metric == "acc_norm";
    titles.push_back(task.title + (norm ? " acc_n ↑" : " acc ↑"));
    const double acc = metrics[task.paper_metric].get<double>();
    cells.push_back(percent(acc));
    accuracy_sum += acc;
    accuracies++;
  }
  if (accuracies > 1) {
    titles.push_back("Avg. ↑");
    cells.push_back(percent(accuracy_sum / accuracies));
  }
  return header(titles) + row(cells);
}

std::string lm_detail_table(const json& lm) {
  std::string out = header({"Task", "n", "acc (%)", "acc_norm (%)", "perplexity", "reported"});
  for (const LmTaskInfo& task : lm_tasks()) {
    if (!lm.contains(task.name)) continue;
    const json& r = lm[task.name];
    if (is_task_error(r)) {
      out += row({task.name, "–", "error", "–", "–", task.paper_metric});
      continue;
    }
    const json& m = r["metrics"];
    auto with_stderr = [&](const char* key) {
      if (!m.contains(key)) return std::string("–");
      return percent(m[key].get<double>()) + " ± " +
             percent(m[std::string(key) + "_stderr"].get<double>());
    };
    out += row({task.name, std::to_string(r["n"].get<int64_t>()), with_stderr("acc"),
                with_stderr("acc_norm"),
                m.contains("perplexity") ? fixed(m["perplexity"].get<double>()) : "–",
                task.paper_metric});
  }
  return out;
}

// The tasks that ran, in RULER's order (niah..., vt, cwe, fwe, qa), not the JSON key order.
std::vector<std::string> ruler_task_order(const json& ruler) {
  std::vector<std::string> names;
  for (const RulerTask& task : ruler_tasks())
    if (ruler["tasks"].contains(task.name)) names.push_back(task.name);
  return names;
}

// A task's score at `length`, or "error" / "–" (not run).
std::string ruler_cell(const json& by_length, const std::string& length) {
  if (!by_length.contains(length)) return "–";
  if (is_task_error(by_length[length])) return "error";
  return fixed(by_length[length]["score"].get<double>());
}

// The metric name of a task: from its first scored length.
std::string ruler_metric(const json& by_length) {
  for (const json& r : by_length)
    if (!is_task_error(r)) return r["metric"].get<std::string>();
  return "–";
}

// "**average** (13 tasks)" and "**average without QA** (11 tasks)", the counts of the first length.
std::vector<std::string> ruler_average_row(const json& ruler, const std::string& name, const std::string& count_key) {
  const json& first = ruler["averaged_tasks"][std::to_string(ruler["lengths"][0].get<int64_t>())];
  const int n = first[count_key].get<int>();
  std::vector<std::string> cells = {"**" + name + "** (" + std::to_string(n) + (n == 1 ? " task)" : " tasks)"), ""};
  const std::string average_key = count_key == "all" ? "average" : "average_" + count_key;
  for (const json& length : ruler["lengths"]) {
    const json& a = ruler[average_key][std::to_string(length.get<int64_t>())];
    cells.push_back(a.is_null() ? "–" : "**" + fixed(a.get<double>()) + "**");
  }
  return cells;
}

std::string ruler_table(const json& ruler) {
  std::vector<std::string> titles = {"Task", "metric"};
  for (const json& length : ruler["lengths"]) titles.push_back(std::to_string(length.get<int64_t>()));
  std::string out = header(titles);
  for (const std::string& task : ruler_task_order(ruler)) {
    const json& by_length = ruler["tasks"][task];
    std::vector<std::string> cells = {task, ruler_metric(by_length)};
    for (const json& length : ruler["lengths"]) cells.push_back(ruler_cell(by_length, std::to_string(length.get<int64_t>())));
    out += row(cells);
  }
  return out + row(ruler_average_row(ruler, "average", "all")) +
         row(ruler_average_row(ruler, "average without QA", "without_qa"));
}

// Every {"error": message} in the results, with its place ("ruler/tasks/vt/4096").
void collect_errors(const json& value, const std::string& where, std::vector<std::string>& out) {
  if (!value.is_object()) return;
  if (is_task_error(value)) {
    out.push_back("`" + where + "`: " + value["error"].get<std::string>());
    return;
  }
  for (auto it = value.begin(); it != value.end(); ++it)
    collect_errors(it.value(), where.empty() ? it.key() : where + "/" + it.key(), out);
}

std::string mqar_table(const json& mqar) {
  std::string out = header({"seq len", "kv pairs", "accuracy (%)", "loss"});
  for (const json& cell : mqar["cells"])
    out += row({std::to_string(cell["seq_len"].get<int64_t>()),
                std::to_string(cell["num_kv_pairs"].get<int64_t>()),
                percent(cell["accuracy"].get<double>()), fixed(cell["loss"].get<double>(), 3)});
  return out;
}

std::string ppl_table(const json& ppl) {
  return header({"file", "documents", "tokens", "loss", "perplexity", "bits/byte", "word ppl"}) +
         row({ppl["file"].get<std::string>(), std::to_string(ppl["documents"].get<int64_t>()),
              std::to_string(ppl["tokens"].get<int64_t>()), fixed(ppl["loss"].get<double>(), 4),
              fixed(ppl["perplexity"].get<double>(), 3), fixed(ppl["bits_per_byte"].get<double>(), 4),
              fixed(ppl["word_perplexity"].get<double>())});
}

std::string ruler_plot(const json& ruler) {
  std::vector<PlotSeries> series;
  // One series per task and the two averages, each over the lengths it has a score at.
  auto add_series = [&](const std::string& name, auto score_at) {
    PlotSeries s{name, {}, {}};
    for (const json& length : ruler["lengths"]) {
      const json score = score_at(std::to_string(length.get<int64_t>()));
      if (score.is_null()) continue;
      s.x.push_back(length.get<double>());
      s.y.push_back(score.get<double>());
    }
    if (!s.x.empty()) series.push_back(s);
  };
  for (const char* average : {"average", "average_without_qa"})
    add_series(average, [&](const std::string& key) { return ruler[average][key]; });
  for (const std::string& task : ruler_task_order(ruler)) {
    const json& by_length = ruler["tasks"][task];
    add_series(task, [&](const std::string& key) {
      return by_length.contains(key) && !is_task_error(by_length[key]) ? by_length[key]["score"] : json();
    });
  }
  return line_plot_svg(series, {"RULER", "length (tokens)", "score (%)", true, 0, 100});
}

}  // namespace

std::string render_report_markdown(const json& results) {
  std::vector<std::string> errors;
  collect_errors(results, "", errors);
  std::string md = "# Evaluation: " + results.value("name", std::string("model")) + "\n\n";
  md += "Model: " + results.value("model", std::string("?")) + "  \n";
  md += "Tokenizer: " + results.value("tokenizer", std::string("?")) + "\n\n";
  if (results.contains("lm_tasks") && !results["lm_tasks"].empty()) {
    md += "## Zero-shot LM tasks\n\nAccuracies in %; acc_n is length-normalised accuracy (the "
          "metric Mamba, GLA, DeltaNet and Gated DeltaNet report for HellaSwag and ARC-c).\n\n";
    md += paper_table(results) + "\n" + lm_detail_table(results["lm_tasks"]) + "\n";
  } else if (results.contains("ppl") && !is_task_error(results["ppl"])) {
    md += paper_table(results) + "\n";
  }
  if (results.contains("ruler") && !is_task_error(results["ruler"])) {
    const json& ruler = results["ruler"];
    md += "## RULER (" + std::to_string(ruler["samples"].get<int64_t>()) +
          " samples per task and length, token scale " + fixed(ruler["token_scale"].get<double>(), 1) +
          ")\n\n" + ruler_table(ruler) + "\n";
    for (const json& note : ruler["notes"]) md += "- note: " + note.get<std::string>() + "\n";
    if (!ruler["notes"].empty()) md += "\n";
  }
  if (results.contains("mqar") && !is_task_error(results["mqar"])) {
    const json& mqar = results["mqar"];
    md += "## MQAR (vocab " + std::to_string(mqar["vocab_size"].get<int64_t>()) + ", " +
          std::to_string(mqar["examples"].get<int64_t>()) + " examples per cell)\n\n" +
          mqar_table(mqar) + "\n";
    for (const json& note : mqar.value("notes", json::array())) md += "- note: " + note.get<std::string>() + "\n";
    if (!mqar.value("notes", json::array()).empty()) md += "\n";
  }
  if (results.contains("ppl") && !is_task_error(results["ppl"]))
    md += "## Held-out perplexity\n\n" + ppl_table(results["ppl"]) + "\n";
  if (!errors.empty()) {
    md += "## Failed tasks\n\n";
    for (const std::string& e : errors) md += "- " + e + "\n";
    md += "\n";
  }
  return md;
}

void write_reports(const json& any_results, const std::string& dir) {
  const json results = valid_utf8_json(any_results);
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& content) {
    write_file_atomic((std::filesystem::path(dir) / name).string(), content);
  };
  write("results.json", results.dump(2) + "\n");
  write("report.md", render_report_markdown(results));
  if (results.contains("ruler") && !is_task_error(results["ruler"]) && results["ruler"]["lengths"].size() >= 2)
    write("ruler.svg", ruler_plot(results["ruler"]));
}

}  // namespace hla::eval
