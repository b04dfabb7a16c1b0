// ResultsLog and the UTF-8 cleaning of results (see results_log.h).
#include "eval/results_log.h"

#include <iostream>

#include "data/unicode.h"
#include "eval/report.h"

namespace hla::eval {

nlohmann::json valid_utf8_json(const nlohmann::json& value) {
  if (value.is_string()) return data::valid_utf8(value.get_ref<const std::string&>());
  if (value.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const nlohmann::json& item : value) out.push_back(valid_utf8_json(item));
    return out;
  }
  if (value.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = value.begin(); it != value.end(); ++it) out[data::valid_utf8(it.key())] = valid_utf8_json(it.value());
    return out;
  }
  return value;
}

nlohmann::json result_or_error(const std::string& label, const std::function<nlohmann::json()>& task) {
  try {
    return task();
  } catch (const std::exception& e) {
    std::cerr << "error: " << label << " failed: " << e.what() << "\n";
    return {{"error", e.what()}};
  }
}

ResultsLog::ResultsLog(const nlohmann::json& header, std::string dir)
    : results_(valid_utf8_json(header)), dir_(std::move(dir)) {}

bool ResultsLog::run(const std::string& where, const std::function<nlohmann::json()>& task) {
  nlohmann::json result = result_or_error(where.substr(1), task);
  const bool failed = is_task_error(result);
  failures_ += failed;
  set(where, result);
  return !failed;
}

void ResultsLog::set(const std::string& where, const nlohmann::json& value) {
  results_[nlohmann::json::json_pointer(where)] = valid_utf8_json(value);
  write_reports(results_, dir_);
}

}  // namespace hla::eval
