// `hla bench`'s row set and reports (nn/check/perf_report.h), on the CPU: every mixer has a row at
// every bench shape; the bench JSON reads back what was written; a measured-anchors file with a
// bad field is an error naming the file and the field, and a good one replaces the figures of
// the passes it measured and only those.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <tuple>

#include "nn/check/perf_report.h"
#include "nn/check/registry.h"
#include "tensor/json.h"

namespace {

using namespace hla;
using namespace hla::check;

std::set<std::string> perf_case_names() {
  std::set<std::string> names;
  for (const Case* c : cases(kPerf)) names.insert(c->name);
  return names;
}

PerfRow measured_row(const std::string& name, const std::string& pass, double ms, double anchor_ms) {
  PerfRow r;
  r.name = name;
  r.group = "delta_rule";
  r.kernel = "chunked fwd+bwd (mma)";
  r.pass = pass;
  r.dims = {{"B", 4}, {"D", 128}, {"H", 16}, {"T", 4096}};  // alphabetical: the order a JSON object reads back in
  r.ms = ms;
  r.tflops = 18.625;
  r.gbps = 182.5;
  r.workspace_bytes = 3.0 * (1 << 20);
  r.anchor = "fla chunk_gated_delta_rule";
  r.anchor_ms = anchor_ms;
  r.anchor_source = anchor_ms > 0 ? "targets.md" : "";
  return r;
}

// The error message of f(), or "" when it does not throw.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

MeasuredAnchors anchors_from(const std::string& text) {
  return measured_anchors_from_json(parse_json(text, "anchors.json"), "anchors.json");
}

}  // namespace

TEST_CASE("hla bench lists every mixer at every bench shape, attention also at T = 16384") {
  const std::set<std::string> names = perf_case_names();
  REQUIRE(kBenchShapes.size() == 3);
  const std::vector<std::string> mixers = {"attention",           "decay_attention scalar", "decay_attention vector",
                                           "rwkv6",               "delta_rule deltanet",    "delta_rule gdn",
                                           "delta_rule kda",      "delta_rule gdn2"};
  for (const std::string& mixer : mixers)
    for (const BenchShape& s : kBenchShapes) {
      const std::string name = mixer + " " + dims_label(bench_dims(s));
      CHECK_MESSAGE(names.count(name) == 1, "no bench row '", name, "'");
    }
  // hgrn runs on x: (B, T, H * D): the last two shapes are both B8 T2048 D1024, one row.
  for (const std::string name : {"hgrn B4 T4096 D2048", "hgrn B8 T2048 D1024"}) CHECK(names.count(name) == 1);
  CHECK(names.count("attention B1 T16384 H16 D128") == 1);
}

TEST_CASE("every bench case has its shape, a mixer's its anchor too and a name ending in the shape's label") {
  for (const Case* c : cases(kPerf)) {
    CAPTURE(c->name);
    REQUIRE(!c->perf.dims.empty());
    // The loss rows ("linear_cross_entropy 374M chunk4096") have no anchor; every other names
    // its shape at the end and has one, but the layers' helper ops (the short convolution,
    // RMSNorm, the gated output norm, rope: not mixers, their yardstick is the memory floor their
    // GB/s column shows).
    if (c->group != "linear_cross_entropy") {
      const std::string label = dims_label(c->perf.dims);
      const bool helper =
          c->group == "short_conv" || c->group == "rmsnorm" || c->group == "gated_norm" || c->group == "rope";
      if (!helper) CHECK(!c->perf.anchor.empty());
      REQUIRE(c->name.size() > label.size());
      CHECK(c->name.substr(c->name.size() - label.size()) == label);
    }
    const std::vector<PerfRow> rows = perf_rows_unmeasured(*c);
    REQUIRE(rows.size() == kPerfRowsPerCase);
    CHECK(rows[0].pass == "fwd");
    CHECK(rows[1].pass == "fwd+bwd");
    CHECK(rows[0].anchor_ms == c->perf.anchor_fwd_ms);
    CHECK(rows[1].anchor_source == (c->perf.anchor_fwd_bwd_ms > 0 ? "targets.md" : ""));
  }
}

TEST_CASE("the bench JSON reads back every field it wrote") {
  const std::vector<PerfRow> rows = {measured_row("delta_rule gdn B4 T4096 H16 D128", "fwd", 1.845, 0.799),
                                     measured_row("delta_rule gdn B4 T4096 H16 D128", "fwd+bwd", 9.172, 0),
                                     measured_row("delta_rule gdn B8 T2048 H4 D256", "fwd", 0, 0)};
  PerfRunInfo info;
  info.commit = "2a94611";
  info.device = "NVIDIA H200";
  info.warmup = 5;
  info.repeats = 20;
  info.anchor_run = {{"autotune", "first config only"}};
  const std::string text = perf_json(rows, info).dump(2);
  const nlohmann::json j = parse_json(text, "results.json");
  CHECK(j["commit"] == "2a94611");
  CHECK(j["anchors"] == "targets.md");
  CHECK(j["anchor_run"]["autotune"] == "first config only");
  CHECK(j["rows"][0]["ratio"].get<double>() == doctest::Approx(1.845 / 0.799).epsilon(1e-12));
  CHECK(j["rows"][1]["ratio"].is_null());
  CHECK(j["rows"][1]["anchor_ms"].is_null());
  CHECK(j["rows"][2]["ms"].is_null());
  const std::vector<PerfRow> back = perf_rows_from_json(j, "results.json");
  REQUIRE(back.size() == rows.size());
  // Every field, exactly (the doubles are written in full precision).
  auto fields = [](const PerfRow& r) {
    return std::tie(r.name, r.group, r.kernel, r.pass, r.dims, r.ms, r.tflops, r.gbps, r.workspace_bytes, r.anchor,
                    r.anchor_ms, r.anchor_source);
  };
  for (size_t i = 0; i < rows.size(); i++) {
    CAPTURE(i);
    CHECK(fields(back[i]) == fields(rows[i]));
  }
  CHECK(perf_table(back) == perf_table(rows));
  // The table prints "-" where a row has no figure, and says where each anchor figure came from.
  const std::string table = perf_table(rows);
  CHECK(table.find("0.799    2.31  fla chunk_gated_delta_rule (targets.md)") != std::string::npos);
  CHECK(table.find("fla chunk_gated_delta_rule (no figure)") != std::string::npos);
}

TEST_CASE("a bench JSON with a bad row is an error naming the file and the field") {
  PerfRunInfo info;
  nlohmann::json j = nlohmann::json::parse(perf_json({measured_row("x B1", "fwd", 1.0, 2.0)}, info).dump());
  auto error = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json bad = j;
    edit(bad);
    return error_of([&] { perf_rows_from_json(bad, "results.json"); });
  };
  CHECK(error([](nlohmann::json& b) { b["rows"][0]["pass"] = "bwd"; }).find("results.json: rows[0].pass") !=
        std::string::npos);
  CHECK(error([](nlohmann::json& b) { b["rows"][0]["ms"] = -1; }).find("results.json: rows[0].ms must be a positive") !=
        std::string::npos);
  CHECK(error([](nlohmann::json& b) { b["rows"][0].erase("kernel"); })
            .find("results.json: rows[0]: missing field 'kernel'") != std::string::npos);
  CHECK(error([](nlohmann::json& b) { b["rows"][0]["shape"]["B"] = 0; }).find("results.json: rows[0].shape.B") !=
        std::string::npos);
  CHECK(error([](nlohmann::json& b) { b.erase("rows"); }).find("results.json: missing field 'rows'") !=
        std::string::npos);
}

TEST_CASE("a measured-anchors file with a bad field is an error naming the file and the field") {
  const std::string good = R"({"device": "H200", "rows": {"attention B4 T4096 H16 D128":
      {"anchor": "torch SDPA flash", "fwd_ms": 0.5, "fwd_bwd_ms": 2.0}}})";
  CHECK(anchors_from(good).at("attention B4 T4096 H16 D128").fwd_bwd_ms == 2.0);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"([1, 2])", "anchors.json: a measured-anchors file must be an object"},
      {R"({"device": "H200"})", "anchors.json: missing field 'rows'"},
      {R"({"rows": [1]})", "anchors.json.rows must be an object"},
      {R"({"rows": {"a B1": 3}})", "anchors.json: rows.'a B1' must be an object"},
      {R"({"rows": {"a B1": {"fwd_ms": 1.0}}})", "anchors.json: rows.'a B1': missing field 'anchor'"},
      {R"({"rows": {"a B1": {"anchor": "fla x", "fwd_ms": "fast"}}})",
       "anchors.json: rows.'a B1'.fwd_ms must be a positive number of ms or null"},
      {R"({"rows": {"a B1": {"anchor": "fla x", "fwd_bwd_ms": 0}}})", "anchors.json: rows.'a B1'.fwd_bwd_ms"},
      {R"({"rows": {"a B1": {"anchor": "fla x", "fwd_error": 7}}})", "anchors.json: rows.'a B1'.fwd_error must be a string"},
  };
  for (const auto& entry : bad) {
    const std::string text = entry.first, message = entry.second;  // a lambda cannot capture a structured binding (C++17)
    CAPTURE(text);
    const std::string e = error_of([&] { anchors_from(text); });
    CHECK_MESSAGE(e.find(message) != std::string::npos, e);
  }
  CHECK(error_of([] { parse_json("{\"rows\": {", "anchors.json"); }).find("anchors.json: not valid JSON") !=
        std::string::npos);
}

TEST_CASE("measured anchors replace the figures of the passes they measured, and a failed pass keeps targets.md's") {
  std::vector<PerfRow> rows = {measured_row("delta_rule gdn B4 T4096 H16 D128", "fwd", 1.845, 0.799),
                               measured_row("delta_rule gdn B4 T4096 H16 D128", "fwd+bwd", 9.172, 3.583),
                               measured_row("delta_rule gdn B8 T2048 H4 D256", "fwd", 1.9, 0)};
  const MeasuredAnchors anchors = anchors_from(R"({"rows": {
      "delta_rule gdn B4 T4096 H16 D128": {"anchor": "fla chunk_gated_delta_rule", "fwd_ms": 0.75,
                                           "fwd_bwd_error": "RuntimeError: Triton >= 3.4.0 and < 3.7.1"},
      "delta_rule gdn B8 T2048 H4 D256": {"anchor": "fla chunk_gated_delta_rule", "fwd_ms": 0.5, "fwd_bwd_ms": 1.5},
      "attention B9": {"anchor": "torch SDPA flash", "fwd_ms": 1.0}}})");
  std::ostringstream notes;
  CHECK(apply_measured_anchors(rows, anchors, "anchors.json", notes) == 2);
  CHECK(rows[0].anchor_ms == 0.75);
  CHECK(rows[0].anchor_source == "measured");
  CHECK(rows[1].anchor_ms == 3.583);  // its anchor failed: targets.md's figure stays
  CHECK(rows[1].anchor_source == "targets.md");
  CHECK(notes.str().find("delta_rule gdn B4 T4096 H16 D128 fwd+bwd: fla chunk_gated_delta_rule failed in "
                         "anchors.json (RuntimeError: Triton >= 3.4.0 and < 3.7.1); targets.md's figure stays") !=
        std::string::npos);
  CHECK(rows[2].anchor_ms == 0.5);
  CHECK(rows[2].anchor_source == "measured");

  std::vector<PerfRow> other = {measured_row("delta_rule gdn B8 T2048 H4 D256", "fwd", 1.9, 0)};
  other[0].anchor = "fla chunk_kda";
  const std::string e = error_of([&] { apply_measured_anchors(other, anchors, "anchors.json", notes); });
  CHECK(e.find("anchors.json: rows.'delta_rule gdn B8 T2048 H4 D256'.anchor is 'fla chunk_gated_delta_rule', but "
               "the bench case's anchor is 'fla chunk_kda'") != std::string::npos);
}
