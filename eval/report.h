// Evaluation reports: results.json (everything, machine-readable) and report.md (Markdown
// tables in the layout of the papers' zero-shot tables, then RULER, MQAR and perplexity).
//
// results layout (every section optional):
//   {"model": str, "tokenizer": str, "settings": {...},
//    "lm_tasks": {name: run_lm_task(...)}, "ruler": run_ruler(...), "mqar": run_mqar(...),
//    "ppl": run_perplexity(...)}
// A task that failed holds {"error": message} instead (results_log.h); the tables mark it and
// a "Failed tasks" section lists every error.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace hla::eval {

std::string render_report_markdown(const nlohmann::json& results);

// Writes <dir>/results.json, <dir>/report.md and, when RULER ran at two or more lengths,
// <dir>/ruler.svg, from valid_utf8_json(results) (any bytes in, valid UTF-8 out). Creates dir
// if needed. Each file is replaced atomically (write_file_atomic):
// a failed write (full disk) throws an hla::Error naming the file and leaves the previous one.
void write_reports(const nlohmann::json& results, const std::string& dir);

}  // namespace hla::eval
