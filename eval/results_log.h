// The results of one `hla eval` run, saved as each task finishes: results.json and report.md
// (write_reports, atomic) are rewritten after every task, so a crash or a failing task loses
// nothing that finished. A task that throws is recorded at its place as {"error": message}
// and the run goes on. Every string is made valid UTF-8 (data::valid_utf8) before it is stored:
// model output and data-file excerpts may hold any bytes, and JSON may not.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace hla::eval {

// A copy of `value` whose every string (keys too) is valid UTF-8, invalid bytes as U+FFFD.
nlohmann::json valid_utf8_json(const nlohmann::json& value);

// A task's result that records a failure ({"error": message}, from result_or_error).
inline bool is_task_error(const nlohmann::json& result) {
  return result.is_object() && result.contains("error");
}

// task(), or {"error": what()} when it throws an std::exception (with a warning naming `label`
// on stderr).
nlohmann::json result_or_error(const std::string& label, const std::function<nlohmann::json()>& task);

class ResultsLog {
 public:
  ResultsLog(const nlohmann::json& header, std::string dir);

  // Runs task() and stores its result, or its error, at `where` (a JSON pointer such as
  // "/lm_tasks/piqa"); then saves. Returns whether the task succeeded.
  bool run(const std::string& where, const std::function<nlohmann::json()>& task);
  // Stores a partial result (a task that reports progress) at `where` and saves.
  void set(const std::string& where, const nlohmann::json& value);

  const nlohmann::json& results() const { return results_; }
  int failures() const { return failures_; }

 private:
  nlohmann::json results_;
  std::string dir_;
  int failures_ = 0;
};

}  // namespace hla::eval
