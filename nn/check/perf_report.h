// What `hla bench` does with perf rows (nn/check/modes.h) once measured: the printed table, the
// bench JSON (bench/results-h200.json is one), and anchors measured in the same GPU run.
//
// Bench JSON: {"commit", "device", "dtype", "warmup", "repeats", "anchors", "anchor_run" (the
// measured-anchors file's record of its run, when there is one), "rows": [row...]},
// one row per PerfRow: {"name", "group", "shape": {"B": 4, ...}, "kernel", "pass", "ms",
// "tflops", "gbps", "workspace_bytes", "anchor", "anchor_ms", "anchor_source", "ratio"}; ms,
// anchor_ms and ratio are null where there is no figure (`hla bench --list --json` writes the
// rows unmeasured: scripts/bench_anchors.py reads their names, shapes and anchors from it).
//
// Measured anchors (scripts/bench_anchors.py): {"rows": {NAME: {"anchor", "fwd_ms",
// "fwd_bwd_ms", "fwd_error", "fwd_bwd_error"}}, ...}, NAME a bench case's name; a pass has its
// time or the error its anchor raised (or neither: not run). Other top-level fields (device,
// versions) are the script's record of its run, copied into the bench JSON's "anchor_run".
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "nn/check/modes.h"

namespace hla::check {

// The table `hla bench` prints: one line per row; ms, ratio and anchor ms "-" where absent.
std::string perf_table(const std::vector<PerfRow>& rows);

struct PerfRunInfo {
  std::string commit = "unknown", device, anchors = "targets.md";  // anchors: the file, or targets.md
  int warmup = 0, repeats = 0;
  nlohmann::json anchor_run;  // the anchors file's record of its run (versions, autotune); null: none
};
nlohmann::ordered_json perf_json(const std::vector<PerfRow>& rows, const PerfRunInfo& info);
// The rows of a bench JSON (perf_json's format); every error names `source` and the field.
std::vector<PerfRow> perf_rows_from_json(const nlohmann::json& j, const std::string& source);

struct MeasuredAnchor {
  std::string anchor;
  double fwd_ms = 0, fwd_bwd_ms = 0;        // 0: not measured
  std::string fwd_error, fwd_bwd_error;     // what the anchor raised, when it failed
};
using MeasuredAnchors = std::map<std::string, MeasuredAnchor>;  // by bench case name

// A measured-anchors file's rows; errors name `source` and the field that broke.
MeasuredAnchors measured_anchors_from_json(const nlohmann::json& j, const std::string& source);
// run, when given, gets the file's other top-level fields (its record of the run: device, versions).
MeasuredAnchors read_measured_anchors(const std::string& path, nlohmann::json* run = nullptr);

// Replaces each row's anchor_ms by the measured time of its pass, where the file has one
// (anchor_source "measured"); a pass whose anchor failed keeps targets.md's figure, and a note
// saying so goes to `notes`. A file row whose anchor differs from the case's is an error naming
// `source` (a file from another version of the bench). Returns how many rows took a measured time.
int apply_measured_anchors(std::vector<PerfRow>& rows, const MeasuredAnchors& anchors, const std::string& source,
                           std::ostream& notes);

}  // namespace hla::check
