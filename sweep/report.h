// The sweep's results: one tidy table (results.csv, results.jsonl: a row per run in grid order,
// every setting and metric a column) and report.md with the papers' tables and SVG plots, all
// rendered from the table alone, so `hla sweep --report DIR` rebuilds them from results.csv.
//
// Columns the report reads (any may be missing; the tables show what is there):
//   run, status ("done" | "failed: ..."), mixer, hybrid, pattern, attn_fraction, routing,
//   optimizer, lr, seed                        the run's axes (runner.h)
//   final_val_loss, final_val_accuracy (%), tokens_per_s, step_ms, peak_gpu_gib, peak_rss_mib,
//   decode_state_bytes, decode_kv_bytes_per_token, decode_mib_at_4096 (nn/decode.h decode_memory)
//   lm.<task> (%), lm_avg (%), ruler.<task> (%), ruler_avg (%), mqar.<len>x<pairs> (%), mqar_avg (%)
//   val_loss_curve                             "step:loss step:loss ..."
// Runs that differ only in seed are one group: every table cell is the mean over the group's
// seeds, with " ± " and the sample standard deviation when there are several.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace hla::sweep {

struct ResultTable {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;  // cells as text, "" where a run has no value

  // The cell of `row` in `column`, "" when there is no such column.
  const std::string& cell(size_t row, const std::string& column) const;
};

// Rows (JSON objects, keys in column order) as a table: the columns are the union of the rows'
// keys in order of first appearance; a number's text is its shortest exact form.
ResultTable table_of_rows(const std::vector<nlohmann::ordered_json>& rows);

// RFC 4180 CSV: a header line, then one line per row; cells with , " or a newline are quoted.
std::string csv_text(const ResultTable& table);
// The inverse; errors name `source` and the line (a row with another number of cells, an
// unclosed quote).
ResultTable parse_csv(const std::string& text, const std::string& source);

// report.md: the tables, and links to the plots of sweep_plots.
std::string render_sweep_report(const ResultTable& table);
// The plots as (file name, SVG document); only those the table has data for.
std::vector<std::pair<std::string, std::string>> sweep_plots(const ResultTable& table);

// Writes <dir>/results.csv, results.jsonl, report.md and the plots, each atomically.
void write_sweep_results(const std::vector<nlohmann::ordered_json>& rows, const std::string& dir);
// `hla sweep --report DIR`: report.md and the plots again from <dir>/results.csv.
void write_report_from_csv(const std::string& dir);

}  // namespace hla::sweep
