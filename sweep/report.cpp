// results.csv, results.jsonl, report.md and the plots of a sweep (see report.h).
#include "sweep/report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "eval/svg_plot.h"
#include "tensor/atomic_file.h"
#include "tensor/error.h"

namespace hla::sweep {

namespace {

using nlohmann::ordered_json;

// The axes that make a group (every one but seed).
const char* const kGroupColumns[] = {"mixer", "hybrid", "pattern", "routing", "optimizer", "lr"};

std::string fixed(double v, int decimals) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(decimals);
  os << v;
  return os.str();
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// A cell as a number; false when empty or not a number.
bool number_of(const std::string& text, double& v) {
  if (text.empty()) return false;
  char* end = nullptr;
  v = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(v);
}

struct Stat {
  int n = 0;
  double mean = 0, std = 0;
};

Stat stat_of(const std::vector<double>& values) {
  Stat s;
  s.n = static_cast<int>(values.size());
  if (s.n == 0) return s;
  for (double v : values) s.mean += v;
  s.mean /= s.n;
  if (s.n > 1) {
    double sq = 0;
    for (double v : values) sq += (v - s.mean) * (v - s.mean);
    s.std = std::sqrt(sq / (s.n - 1));
  }
  return s;
}

// "51.2", or "51.2 ± 1.3" over several seeds, or "–".
std::string stat_text(const Stat& s, int decimals) {
  if (s.n == 0) return "–";
  return s.n == 1 ? fixed(s.mean, decimals) : fixed(s.mean, decimals) + " ± " + fixed(s.std, decimals);
}

std::string md_row(const std::vector<std::string>& cells) {
  std::string out = "|";
  for (const std::string& c : cells) out += " " + c + " |";
  return out + "\n";
}

// A header; the first `text_columns` are left-aligned, the rest (numbers) right-aligned.
std::string md_header(const std::vector<std::string>& cells, size_t text_columns) {
  std::string out = md_row(cells) + "|";
  for (size_t i = 0; i < cells.size(); i++) out += i < text_columns ? "---|" : "---:|";
  return out + "\n";
}

// The finished runs, grouped by every axis but the seed, groups in order of first appearance.
struct Group {
  std::vector<std::string> key;  // the kGroupColumns cells
  std::vector<size_t> rows;
};

class Groups {
 public:
  explicit Groups(const ResultTable& table) : table_(table) {
    for (size_t r = 0; r < table.rows.size(); r++) {
      if (table.cell(r, "status") != "done") continue;
      std::vector<std::string> key;
      for (const char* c : kGroupColumns) key.push_back(table.cell(r, c));
      auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) { return g.key == key; });
      if (it == groups_.end()) groups_.push_back({key, {r}});
      else it->rows.push_back(r);
    }
  }
  const std::vector<Group>& all() const { return groups_; }
  const std::string& key(const Group& g, const std::string& column) const {
    for (size_t i = 0; i < std::size(kGroupColumns); i++)
      if (column == kGroupColumns[i]) return g.key[i];
    fail("sweep report: '", column, "' is not a group column");
  }
  Stat stat(const Group& g, const std::string& column) const {
    std::vector<double> values;
    double v = 0;
    for (size_t r : g.rows)
      if (number_of(table_.cell(r, column), v)) values.push_back(v);
    return stat_of(values);
  }
  bool any(const std::string& column) const {
    for (const Group& g : groups_)
      if (stat(g, column).n > 0) return true;
    return false;
  }
  // The group columns that differ between groups (mixer and hybrid always), in kGroupColumns order.
  std::vector<std::string> varying(const std::set<std::string>& leave_out = {}) const {
    std::vector<std::string> out;
    for (size_t i = 0; i < std::size(kGroupColumns); i++) {
      const std::string c = kGroupColumns[i];
      if (c == "pattern" || leave_out.count(c)) continue;
      bool differs = c == "mixer" || c == "hybrid";
      for (const Group& g : groups_) differs = differs || g.key[i] != groups_[0].key[i];
      if (differs) out.push_back(c);
    }
    return out;
  }
  std::vector<std::string> key_cells(const Group& g, const std::vector<std::string>& columns) const {
    std::vector<std::string> cells;
    for (const std::string& c : columns)
      cells.push_back(c == "hybrid" ? key(g, "hybrid") + " (" + key(g, "pattern") + ")" : key(g, c));
    return cells;
  }
  bool several_seeds() const {
    return std::any_of(groups_.begin(), groups_.end(), [](const Group& g) { return g.rows.size() > 1; });
  }

 private:
  const ResultTable& table_;
  std::vector<Group> groups_;
};

// The columns starting with `prefix`, in table order.
std::vector<std::string> columns_with(const ResultTable& table, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& c : table.columns)
    if (starts_with(c, prefix)) out.push_back(c);
  return out;
}

// The recall metric of the rankings and plots: MQAR, else RULER, else MQAR validation accuracy.
struct Metric {
  std::string column, title;
};
Metric recall_metric(const Groups& groups) {
  for (const Metric& m : {Metric{"mqar_avg", "MQAR accuracy (%)"}, Metric{"ruler_avg", "RULER average (%)"},
                          Metric{"final_val_accuracy", "MQAR validation accuracy (%)"}})
    if (groups.any(m.column)) return m;
  return {};
}

// ---------------------------------------------------------------- tables

// One row per group: the varying axes, then the given metric columns (title, column, decimals).
struct MetricColumn {
  std::string title, column;
  int decimals;
};
std::string group_table(const Groups& groups, const std::vector<MetricColumn>& metrics) {
  const std::vector<std::string> keys = groups.varying();
  std::vector<std::string> titles = keys;
  if (groups.several_seeds()) titles.push_back("seeds");
  for (const MetricColumn& m : metrics) titles.push_back(m.title);
  std::string out = md_header(titles, keys.size());
  for (const Group& g : groups.all()) {
    std::vector<std::string> cells = groups.key_cells(g, keys);
    if (groups.several_seeds()) cells.push_back(std::to_string(g.rows.size()));
    for (const MetricColumn& m : metrics) cells.push_back(stat_text(groups.stat(g, m.column), m.decimals));
    out += md_row(cells);
  }
  return out;
}

std::string main_table(const ResultTable& table, const Groups& groups) {
  std::vector<MetricColumn> metrics;
  if (groups.any("params")) metrics.push_back({"params", "params", 0});
  for (const std::string& c : columns_with(table, "lm.")) metrics.push_back({c.substr(3) + " (%)", c, 1});
  const MetricColumn candidates[] = {{"LM avg (%)", "lm_avg", 1},
                                     {"RULER avg (%)", "ruler_avg", 1},
                                     {"MQAR avg (%)", "mqar_avg", 1},
                                     {"val loss", "final_val_loss", 3},
                                     {"val acc (%)", "final_val_accuracy", 1},
                                     {"held-out loss", "ppl.loss", 3},
                                     {"tokens/s", "tokens_per_s", 0},
                                     {"step (ms)", "step_ms", 1},
                                     {"peak GPU (GiB)", "peak_gpu_gib", 2},
                                     {"peak RSS (MiB)", "peak_rss_mib", 0},
                                     {"decode state (bytes)", "decode_state_bytes", 0},
                                     {"KV (bytes/token)", "decode_kv_bytes_per_token", 0},
                                     {"decode at 4K (MiB)", "decode_mib_at_4096", 2}};
  for (const MetricColumn& m : candidates)
    if (groups.any(m.column)) metrics.push_back(m);
  return group_table(groups, metrics);
}

std::string per_column_table(const ResultTable& table, const Groups& groups, const std::string& prefix,
                             const std::string& average) {
  std::vector<MetricColumn> metrics;
  for (const std::string& c : columns_with(table, prefix)) metrics.push_back({c.substr(prefix.size()), c, 1});
  metrics.push_back({"**average**", average, 1});
  return group_table(groups, metrics);
}

std::string signed_text(double v, int decimals) { return (v >= 0 ? "+" : "") + fixed(v, decimals); }

// Paper 2: per mixer and optimiser (and any other varying axis), the final validation loss of
// each routing and its difference to no routing.
std::string routing_table(const Groups& groups) {
  std::vector<std::string> routings;
  for (const Group& g : groups.all())
    if (std::find(routings.begin(), routings.end(), groups.key(g, "routing")) == routings.end())
      routings.push_back(groups.key(g, "routing"));
  if (routings.size() < 2 || std::find(routings.begin(), routings.end(), "none") == routings.end()) return "";
  std::stable_partition(routings.begin(), routings.end(), [](const std::string& r) { return r == "none"; });
  std::vector<std::string> keys = groups.varying({"routing"});
  if (std::find(keys.begin(), keys.end(), "optimizer") == keys.end()) keys.push_back("optimizer");
  std::vector<std::string> titles = keys;
  for (const std::string& r : routings) titles.push_back(r == "none" ? "none" : r + " (Δ vs none)");
  std::string out = md_header(titles, keys.size());
  std::vector<std::vector<std::string>> seen;
  for (const Group& g : groups.all()) {
    std::vector<std::string> row_key;
    for (const std::string& k : keys) row_key.push_back(groups.key(g, k));
    if (std::find(seen.begin(), seen.end(), row_key) != seen.end()) continue;
    seen.push_back(row_key);
    auto cell_of = [&](const std::string& routing) {
      for (const Group& h : groups.all()) {
        bool same = groups.key(h, "routing") == routing;
        for (size_t i = 0; i < keys.size(); i++) same = same && groups.key(h, keys[i]) == row_key[i];
        if (same) return groups.stat(h, "final_val_loss");
      }
      return Stat();
    };
    const Stat none = cell_of("none");
    std::vector<std::string> cells = groups.key_cells(g, keys);
    for (const std::string& r : routings) {
      const Stat s = cell_of(r);
      std::string text = stat_text(s, 3);
      if (r != "none" && s.n > 0 && none.n > 0) text += " (" + signed_text(s.mean - none.mean, 3) + ")";
      cells.push_back(text);
    }
    out += md_row(cells);
  }
  return out;
}

// Kendall's tau-b between two scorings of the same items (x[i], y[i] of item i): 1 the same
// order, -1 reversed, ties counted as neither; NaN when either side ties every pair (all
// mixers at 0 % RULER, say), where an order says nothing.
double kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y) {
  double concordant_minus_discordant = 0, untied_x = 0, untied_y = 0;
  for (size_t i = 0; i < x.size(); i++)
    for (size_t j = i + 1; j < x.size(); j++) {
      const int sx = (x[i] > x[j]) - (x[i] < x[j]), sy = (y[i] > y[j]) - (y[i] < y[j]);
      concordant_minus_discordant += sx * sy;
      untied_x += sx != 0;
      untied_y += sy != 0;
    }
  if (untied_x == 0 || untied_y == 0) return std::numeric_limits<double>::quiet_NaN();
  return concordant_minus_discordant / std::sqrt(untied_x * untied_y);
}

// Per mixer (the Transformer aside) and hybrid value: the metric's mean over every other axis.
std::map<std::string, std::map<std::string, double>> by_mixer_and_hybrid(const ResultTable& table,
                                                                         const std::string& column) {
  std::map<std::string, std::map<std::string, std::vector<double>>> values;
  double v = 0;
  for (size_t r = 0; r < table.rows.size(); r++)
    if (table.cell(r, "status") == "done" && table.cell(r, "mixer") != "transformer" &&
        number_of(table.cell(r, column), v))
      values[table.cell(r, "hybrid")][table.cell(r, "mixer")].push_back(v);
  std::map<std::string, std::map<std::string, double>> means;
  for (auto& [hybrid, mixers] : values)
    for (auto& [mixer, list] : mixers) means[hybrid][mixer] = stat_of(list).mean;
  return means;
}

// The mixers of `scores` best first (higher is better unless `lower_better`), ties by name and
// written "a = b".
std::string ranking_text(const std::map<std::string, double>& scores, std::vector<std::string> mixers,
                         bool lower_better) {
  std::stable_sort(mixers.begin(), mixers.end(), [&](const std::string& a, const std::string& b) {
    return lower_better ? scores.at(a) < scores.at(b) : scores.at(a) > scores.at(b);
  });
  std::string out;
  for (size_t i = 0; i < mixers.size(); i++)
    out += (i == 0 ? "" : scores.at(mixers[i]) == scores.at(mixers[i - 1]) ? " = " : " > ") + mixers[i];
  return out;
}

// Paper 1's question: does the standalone (pure) order of the mixers predict their order in a
// hybrid? One line per metric and hybrid ratio.
std::string rankings_table(const ResultTable& table, const Groups& groups) {
  std::vector<Metric> metrics;
  const Metric recall = recall_metric(groups);
  if (!recall.column.empty()) metrics.push_back(recall);
  if (groups.any("lm_avg")) metrics.push_back({"lm_avg", "LM avg (%)"});
  if (groups.any("final_val_loss")) metrics.push_back({"final_val_loss", "val loss"});
  std::string out;
  for (const Metric& m : metrics) {
    const auto means = by_mixer_and_hybrid(table, m.column);
    if (!means.count("pure")) continue;
    const bool lower_better = m.column == "final_val_loss";
    for (const auto& [hybrid, scores] : means) {
      if (hybrid == "pure") continue;
      std::vector<std::string> mixers;
      for (const auto& [mixer, score] : scores)
        if (means.at("pure").count(mixer)) mixers.push_back(mixer);
      if (mixers.size() < 2) continue;
      std::vector<double> pure_scores, hybrid_scores;
      for (const std::string& mixer : mixers) {
        pure_scores.push_back(means.at("pure").at(mixer));
        hybrid_scores.push_back(scores.at(mixer));
      }
      const double tau = kendall_tau_b(pure_scores, hybrid_scores);
      if (out.empty())
        out = md_header({"metric", "hybrid", "standalone order (pure)", "hybrid order", "Kendall τ-b", "same order"}, 4);
      out += md_row({m.title, hybrid, ranking_text(means.at("pure"), mixers, lower_better),
                     ranking_text(scores, mixers, lower_better), std::isnan(tau) ? "n/a (all tied)" : fixed(tau, 2),
                     std::isnan(tau) ? "n/a" : tau > 1 - 1e-12 ? "yes" : "no"});
    }
  }
  return out;
}

std::string failed_runs(const ResultTable& table) {
  std::string out;
  for (size_t r = 0; r < table.rows.size(); r++)
    if (table.cell(r, "status") != "done") out += "- " + table.cell(r, "run") + ": " + table.cell(r, "status") + "\n";
  return out;
}

// ---------------------------------------------------------------- plots

// Per mixer, (x, y) means over every other axis, sorted by `order` (the attention fraction).
std::vector<eval::PlotSeries> mixer_series(const ResultTable& table, const std::string& x_column,
                                           const std::string& y_column) {
  std::vector<std::string> mixers;
  std::map<std::string, std::map<double, std::vector<std::pair<double, double>>>> points;  // mixer -> fraction -> (x, y)
  double x = 0, y = 0, fraction = 0;
  for (size_t r = 0; r < table.rows.size(); r++) {
    if (table.cell(r, "status") != "done" || !number_of(table.cell(r, x_column), x) ||
        !number_of(table.cell(r, y_column), y) || !number_of(table.cell(r, "attn_fraction"), fraction))
      continue;
    const std::string& mixer = table.cell(r, "mixer");
    if (!points.count(mixer)) mixers.push_back(mixer);
    points[mixer][fraction].push_back({x, y});
  }
  std::vector<eval::PlotSeries> series;
  for (const std::string& mixer : mixers) {
    eval::PlotSeries s{mixer, {}, {}};
    for (const auto& [f, list] : points[mixer]) {
      std::vector<double> xs, ys;
      for (const auto& [px, py] : list) {
        xs.push_back(px);
        ys.push_back(py);
      }
      s.x.push_back(stat_of(xs).mean);
      s.y.push_back(stat_of(ys).mean);
    }
    series.push_back(s);
  }
  return series;
}

// "step:loss step:loss" -> a series.
eval::PlotSeries curve_series(const std::string& name, const std::string& curve) {
  eval::PlotSeries s{name, {}, {}};
  std::istringstream in(curve);
  for (std::string point; in >> point;) {
    const size_t colon = point.find(':');
    double step = 0, loss = 0;
    if (colon != std::string::npos && number_of(point.substr(0, colon), step) && number_of(point.substr(colon + 1), loss)) {
      s.x.push_back(step);
      s.y.push_back(loss);
    }
  }
  return s;
}

}  // namespace

const std::string& ResultTable::cell(size_t row, const std::string& column) const {
  static const std::string empty;
  for (size_t c = 0; c < columns.size(); c++)
    if (columns[c] == column) return c < rows[row].size() ? rows[row][c] : empty;
  return empty;
}

ResultTable table_of_rows(const std::vector<ordered_json>& rows) {
  ResultTable table;
  for (const ordered_json& row : rows)
    for (auto it = row.begin(); it != row.end(); ++it)
      if (std::find(table.columns.begin(), table.columns.end(), it.key()) == table.columns.end())
        table.columns.push_back(it.key());
  for (const ordered_json& row : rows) {
    std::vector<std::string> cells;
    for (const std::string& c : table.columns) {
      const auto it = row.find(c);
      if (it == row.end() || it->is_null()) cells.emplace_back();
      else cells.push_back(it->is_string() ? it->get<std::string>() : it->dump());
    }
    table.rows.push_back(cells);
  }
  return table;
}

std::string csv_text(const ResultTable& table) {
  auto line = [](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size(); i++) {
      const std::string& c = cells[i];
      out += i ? "," : "";
      if (c.find_first_of(",\"\n\r") == std::string::npos) {
        out += c;
        continue;
      }
      out += '"';
      for (char ch : c) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
      out += '"';
    }
    return out + "\n";
  };
  std::string out = line(table.columns);
  for (const auto& row : table.rows) out += line(row);
  return out;
}

ResultTable parse_csv(const std::string& text, const std::string& source) {
  std::vector<std::vector<std::string>> lines;
  std::vector<std::string> cells;
  std::string cell;
  bool quoted = false, any = false;
  int line = 1, quote_line = 0;
  for (size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') cell += text[++i];
      else if (c == '"') quoted = false;
      else cell += c;
      line += c == '\n';
    } else if (c == '"' && cell.empty()) {
      quoted = true;
      quote_line = line;
    } else if (c == ',') {
      cells.push_back(cell);
      cell.clear();
    } else if (c == '\n') {
      cells.push_back(cell);
      cell.clear();
      lines.push_back(cells);
      cells.clear();
      line++;
    } else if (c != '\r') {
      cell += c;
    }
    any = true;
  }
  HLA_CHECK_INPUT(!quoted, source, ":", quote_line, ": the quoted cell opened here has no closing quote");
  if (!cell.empty() || !cells.empty()) {
    cells.push_back(cell);
    lines.push_back(cells);
  }
  HLA_CHECK_INPUT(any && !lines.empty(), source, ": empty (expected a header line of column names)");
  ResultTable table;
  table.columns = lines[0];
  for (size_t r = 1; r < lines.size(); r++) {
    HLA_CHECK_INPUT(lines[r].size() == table.columns.size(), source, ": row ", r, " has ", lines[r].size(),
                    " cells, the header ", table.columns.size());
    table.rows.push_back(lines[r]);
  }
  return table;
}

std::string render_sweep_report(const ResultTable& table) {
  const Groups groups(table);
  std::string md = "# Sweep report\n\n";
  md += std::to_string(table.rows.size()) + " runs, " + std::to_string(groups.all().size()) + " settings";
  md += groups.several_seeds() ? " (cells: mean ± sample std over seeds)" : "";
  md += ". Accuracies and scores in %; losses in nats per token; hybrid shows the layer pattern "
        "(L linear, A attention).\n\n";
  md += "## Per mixer and ratio\n\n" + main_table(table, groups) + "\n";
  if (!columns_with(table, "ruler.").empty())
    md += "## RULER per task (%)\n\n" + per_column_table(table, groups, "ruler.", "ruler_avg") + "\n";
  if (!columns_with(table, "mqar.").empty())
    md += "## MQAR per cell (seq len x kv pairs, accuracy %)\n\n" +
          per_column_table(table, groups, "mqar.", "mqar_avg") + "\n";
  const std::string routing = routing_table(groups);
  if (!routing.empty())
    md += "## Routing (final validation loss; in brackets the difference to no routing, negative is "
          "better)\n\n" + routing + "\n";
  const std::string ranks = rankings_table(table, groups);
  if (!ranks.empty())
    md += "## Rankings: does the standalone order predict the hybrid order?\n\n" + ranks + "\n";
  const auto plots = sweep_plots(table);
  if (!plots.empty()) {
    md += "## Plots\n\n";
    for (const auto& [file, svg] : plots) md += "![" + file + "](" + file + ")\n\n";
  }
  const std::string failed = failed_runs(table);
  if (!failed.empty()) md += "## Runs that did not finish\n\n" + failed + "\n";
  return md;
}

std::vector<std::pair<std::string, std::string>> sweep_plots(const ResultTable& table) {
  std::vector<std::pair<std::string, std::string>> plots;
  const Groups groups(table);
  const std::string ratio_label = "attention layers / all layers (fraction)";
  auto add = [&](const std::string& file, const std::vector<eval::PlotSeries>& series, const eval::PlotOptions& o) {
    if (!series.empty()) plots.push_back({file, eval::line_plot_svg(series, o)});
  };
  const Metric recall = recall_metric(groups);
  if (!recall.column.empty()) {
    add("recall_vs_ratio.svg", mixer_series(table, "attn_fraction", recall.column),
        {"Recall vs attention ratio, per mixer", ratio_label, recall.title, false, 0, 100});
    if (groups.any("lm_avg"))
      add("lm_vs_recall.svg", mixer_series(table, recall.column, "lm_avg"),
          {"LM average vs recall (points in order of attention ratio)", recall.title, "LM average accuracy (%)"});
  }
  if (groups.any("tokens_per_s"))
    add("tokens_per_s_vs_ratio.svg", mixer_series(table, "attn_fraction", "tokens_per_s"),
        {"Training throughput vs attention ratio", ratio_label, "training tokens per second"});
  if (groups.any("decode_mib_at_4096"))
    add("decode_memory_vs_ratio.svg", mixer_series(table, "attn_fraction", "decode_mib_at_4096"),
        {"Decoding memory per sequence at 4096 tokens", ratio_label, "states + KV cache (MiB)"});
  std::vector<std::string> mixers;
  for (size_t r = 0; r < table.rows.size(); r++)
    if (std::find(mixers.begin(), mixers.end(), table.cell(r, "mixer")) == mixers.end())
      mixers.push_back(table.cell(r, "mixer"));
  for (const std::string& mixer : mixers) {
    std::vector<eval::PlotSeries> curves;
    for (size_t r = 0; r < table.rows.size(); r++) {
      if (table.cell(r, "mixer") != mixer || table.cell(r, "status") != "done") continue;
      std::string label = table.cell(r, "run");
      if (starts_with(label, mixer + "-")) label = label.substr(mixer.size() + 1);
      eval::PlotSeries s = curve_series(label, table.cell(r, "val_loss_curve"));
      if (!s.x.empty()) curves.push_back(s);
    }
    add("val_loss_" + mixer + ".svg", curves,
        {"Validation loss: " + mixer, "step (optimizer updates)", "validation loss (nats/token)"});
  }
  return plots;
}

namespace {

void write_report_files(const ResultTable& table, const std::string& dir) {
  write_file_atomic(dir + "/report.md", render_sweep_report(table));
  for (const auto& [file, svg] : sweep_plots(table)) write_file_atomic(dir + "/" + file, svg);
}

}  // namespace

void write_sweep_results(const std::vector<ordered_json>& rows, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const ResultTable table = table_of_rows(rows);
  write_file_atomic(dir + "/results.csv", csv_text(table));
  std::string jsonl;
  for (const ordered_json& row : rows) jsonl += row.dump(-1, ' ', false, ordered_json::error_handler_t::replace) + "\n";
  write_file_atomic(dir + "/results.jsonl", jsonl);
  write_report_files(table, dir);
}

void write_report_from_csv(const std::string& dir) {
  const std::string path = dir + "/results.csv";
  std::ifstream in(path, std::ios::binary);
  HLA_CHECK_INPUT(in, path, ": cannot open (", std::strerror(errno), "); --report needs a sweep directory");
  std::stringstream text;
  text << in.rdbuf();
  write_report_files(parse_csv(text.str(), path), dir);
}

}  // namespace hla::sweep
