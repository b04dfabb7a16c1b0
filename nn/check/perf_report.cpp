// The bench table, the bench JSON and measured anchors (see perf_report.h).
#include "nn/check/perf_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "nn/weights.h"
#include "tensor/json.h"

namespace hla::check {
namespace {

double ratio(const PerfRow& r) { return r.ms > 0 && r.anchor_ms > 0 ? r.ms / r.anchor_ms : 0; }

// A positive time, or null for 0 (no figure).
nlohmann::ordered_json ms_or_null(double ms) { return ms > 0 ? nlohmann::ordered_json(ms) : nullptr; }

// ---- reading fields, every error naming the file and the field ----

const nlohmann::json& field(const nlohmann::json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  HLA_CHECK_INPUT(it != obj.end(), where, ": missing field '", key, "'");
  return *it;
}

std::string string_field(const nlohmann::json& obj, const char* key, const std::string& where) {
  const nlohmann::json& v = field(obj, key, where);
  HLA_CHECK_INPUT(v.is_string(), where, ".", key, " must be a string, got ", json_excerpt(v));
  return v.get<std::string>();
}

// A time in ms: a positive finite number, or null / absent (0) where `nullable`.
double ms_field(const nlohmann::json& obj, const char* key, const std::string& where, bool nullable) {
  const auto it = obj.find(key);
  if (nullable && (it == obj.end() || it->is_null())) return 0;
  HLA_CHECK_INPUT(it != obj.end(), where, ": missing field '", key, "'");
  HLA_CHECK_INPUT(it->is_number() && std::isfinite(it->get<double>()) && it->get<double>() > 0, where, ".", key,
                  " must be a positive number of ms", nullable ? " or null" : "", ", got ", json_excerpt(*it));
  return it->get<double>();
}

double number_field(const nlohmann::json& obj, const char* key, const std::string& where) {
  const nlohmann::json& v = field(obj, key, where);
  HLA_CHECK_INPUT(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0, where, ".", key,
                  " must be a number >= 0, got ", json_excerpt(v));
  return v.get<double>();
}

std::string optional_string(const nlohmann::json& obj, const char* key, const std::string& where) {
  return obj.contains(key) ? string_field(obj, key, where) : "";
}

}  // namespace

std::string perf_table(const std::vector<PerfRow>& rows) {
  int name_width = 5, kernel_width = 6;  // wide enough for the longest name and kernel
  for (const auto& r : rows) {
    name_width = std::max(name_width, static_cast<int>(r.name.size()));
    kernel_width = std::max(kernel_width, static_cast<int>(r.kernel.size()));
  }
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s %-*s %-7s %9s %9s %8s %9s %10s %7s  %s\n", name_width, "bench", kernel_width,
                "kernel", "pass", "ms", "TFLOP/s", "GB/s", "work MiB", "anchor ms", "ratio", "anchor (figure from)");
  out += line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%-*s %-*s %-7s ", name_width, r.name.c_str(), kernel_width, r.kernel.c_str(),
                  r.pass.c_str());
    out += line;
    if (r.ms > 0) std::snprintf(line, sizeof line, "%9.3f %9.1f %8.0f %9.1f", r.ms, r.tflops, r.gbps,
                                r.workspace_bytes / double(1 << 20));
    else std::snprintf(line, sizeof line, "%9s %9s %8s %9s", "-", "-", "-", "-");
    out += line;
    if (r.anchor_ms > 0) std::snprintf(line, sizeof line, " %10.3f", r.anchor_ms);
    else std::snprintf(line, sizeof line, " %10s", "-");
    out += line;
    if (ratio(r) > 0) std::snprintf(line, sizeof line, " %7.2f", ratio(r));
    else std::snprintf(line, sizeof line, " %7s", "-");
    out += line;
    if (!r.anchor.empty())
      out += "  " + r.anchor + " (" + (r.anchor_source.empty() ? "no figure" : r.anchor_source) + ")";
    out += "\n";
  }
  return out;
}

nlohmann::ordered_json perf_json(const std::vector<PerfRow>& rows, const PerfRunInfo& info) {
  nlohmann::ordered_json out = {{"commit", info.commit}, {"device", info.device},  {"dtype", "bf16"},
                                {"warmup", info.warmup}, {"repeats", info.repeats}, {"anchors", info.anchors}};
  if (!info.anchor_run.is_null()) out["anchor_run"] = info.anchor_run;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const PerfRow& r : rows) {
    nlohmann::ordered_json shape = nlohmann::ordered_json::object();
    for (const auto& [letter, size] : r.dims) shape[letter] = size;
    const double q = ratio(r);
    list.push_back({{"name", r.name},
                    {"group", r.group},
                    {"shape", shape},
                    {"kernel", r.kernel},
                    {"pass", r.pass},
                    {"ms", ms_or_null(r.ms)},
                    {"tflops", r.tflops},
                    {"gbps", r.gbps},
                    {"workspace_bytes", r.workspace_bytes},
                    {"anchor", r.anchor},
                    {"anchor_ms", ms_or_null(r.anchor_ms)},
                    {"anchor_source", r.anchor_source},
                    {"ratio", q > 0 ? nlohmann::ordered_json(q) : nullptr}});
  }
  out["rows"] = list;
  return out;
}

std::vector<PerfRow> perf_rows_from_json(const nlohmann::json& j, const std::string& source) {
  HLA_CHECK_INPUT(j.is_object(), source, ": a bench JSON must be an object, got ", json_excerpt(j));
  const nlohmann::json& list = field(j, "rows", source);
  HLA_CHECK_INPUT(list.is_array(), source, ".rows must be an array, got ", json_excerpt(list));
  std::vector<PerfRow> rows;
  for (size_t i = 0; i < list.size(); i++) {
    const std::string where = source + ": rows[" + std::to_string(i) + "]";
    const nlohmann::json& e = list[i];
    HLA_CHECK_INPUT(e.is_object(), where, " must be an object, got ", json_excerpt(e));
    PerfRow r;
    r.name = string_field(e, "name", where);
    r.group = string_field(e, "group", where);
    r.kernel = string_field(e, "kernel", where);
    r.pass = string_field(e, "pass", where);
    HLA_CHECK_INPUT(r.pass == "fwd" || r.pass == "fwd+bwd", where, ".pass must be \"fwd\" or \"fwd+bwd\", got '",
                    excerpt(r.pass), "'");
    const nlohmann::json& shape = field(e, "shape", where);
    HLA_CHECK_INPUT(shape.is_object(), where, ".shape must be an object {\"B\": 4, ...}, got ", json_excerpt(shape));
    for (auto it = shape.begin(); it != shape.end(); ++it) {
      HLA_CHECK_INPUT(it->is_number_integer() && it->get<int64_t>() > 0, where, ".shape.", it.key(),
                      " must be a positive integer, got ", json_excerpt(*it));
      r.dims.emplace_back(it.key(), it->get<int64_t>());
    }
    r.ms = ms_field(e, "ms", where, true);
    r.tflops = number_field(e, "tflops", where);
    r.gbps = number_field(e, "gbps", where);
    r.workspace_bytes = number_field(e, "workspace_bytes", where);
    r.anchor = string_field(e, "anchor", where);
    r.anchor_ms = ms_field(e, "anchor_ms", where, true);
    r.anchor_source = string_field(e, "anchor_source", where);
    rows.push_back(r);
  }
  return rows;
}

MeasuredAnchors measured_anchors_from_json(const nlohmann::json& j, const std::string& source) {
  HLA_CHECK_INPUT(j.is_object(), source, ": a measured-anchors file must be an object, got ", json_excerpt(j));
  const nlohmann::json& rows = field(j, "rows", source);
  HLA_CHECK_INPUT(rows.is_object(), source, ".rows must be an object {bench case name: anchor times}, got ",
                  json_excerpt(rows));
  MeasuredAnchors out;
  for (auto it = rows.begin(); it != rows.end(); ++it) {
    const std::string where = source + ": rows.'" + excerpt(it.key()) + "'";
    const nlohmann::json& e = it.value();
    HLA_CHECK_INPUT(e.is_object(), where, " must be an object, got ", json_excerpt(e));
    MeasuredAnchor a;
    a.anchor = string_field(e, "anchor", where);
    a.fwd_ms = ms_field(e, "fwd_ms", where, true);
    a.fwd_bwd_ms = ms_field(e, "fwd_bwd_ms", where, true);
    a.fwd_error = optional_string(e, "fwd_error", where);
    a.fwd_bwd_error = optional_string(e, "fwd_bwd_error", where);
    out[it.key()] = a;
  }
  return out;
}

MeasuredAnchors read_measured_anchors(const std::string& path, nlohmann::json* run) {
  nlohmann::json j = read_json_file(path);
  MeasuredAnchors anchors = measured_anchors_from_json(j, path);
  if (run) {
    j.erase("rows");
    *run = j;
  }
  return anchors;
}

int apply_measured_anchors(std::vector<PerfRow>& rows, const MeasuredAnchors& anchors, const std::string& source,
                           std::ostream& notes) {
  int measured = 0;
  for (PerfRow& r : rows) {
    const auto it = anchors.find(r.name);
    if (it == anchors.end()) continue;
    const MeasuredAnchor& a = it->second;
    HLA_CHECK_INPUT(a.anchor == r.anchor, source, ": rows.'", r.name, "'.anchor is '", excerpt(a.anchor),
                    "', but the bench case's anchor is '", r.anchor,
                    "' (a file from another version of the bench: run scripts/bench_anchors.py again)");
    const bool fwd = r.pass == "fwd";
    const double ms = fwd ? a.fwd_ms : a.fwd_bwd_ms;
    const std::string& error = fwd ? a.fwd_error : a.fwd_bwd_error;
    if (ms > 0) {
      r.anchor_ms = ms;
      r.anchor_source = "measured";
      measured++;
    } else if (!error.empty()) {
      notes << "bench: " << r.name << " " << r.pass << ": " << r.anchor << " failed in " << source << " ("
            << excerpt(error, 200) << "); " << (r.anchor_ms > 0 ? "targets.md's figure stays" : "no anchor figure")
            << "\n";
    }
  }
  return measured;
}

}  // namespace hla::check
