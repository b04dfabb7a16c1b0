// The n-gram baseline (Witten-Bell probabilities by hand, normalisation, greedy generation)
// and the report writers (paper table, files, SVG; a full disk keeps the previous reports).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>

#include "eval/ngram_model.h"
#include "eval/report.h"
#include "eval/svg_plot.h"
#include "tensor/error.h"
#include "tests/test_full_disk.h"

using namespace hla::eval;

TEST_CASE("eval: Witten-Bell n-gram probabilities match the hand computation") {
  NgramModel model(2, 4);
  model.add_document({0, 1, 0, 1, 0, 2});
  model.finalize();
  std::vector<double> p;
  // unigram: counts 0:3 1:2 2:1 (6 tokens, 3 types) over a uniform 1/4:
  //   P(w) = (c(w) + 3/4) / 9
  model.next_token_distribution({3}, 0, p);  // history "3" never seen: the unigram level
  CHECK(p[0] == doctest::Approx(3.75 / 9));
  CHECK(p[1] == doctest::Approx(2.75 / 9));
  CHECK(p[2] == doctest::Approx(1.75 / 9));
  CHECK(p[3] == doctest::Approx(0.75 / 9));
  // after "0": 1 twice, 2 once (3 tokens, 2 types): P(w | 0) = (c(0, w) + 2 P(w)) / 5
  model.next_token_distribution({0}, 0, p);
  CHECK(p[0] == doctest::Approx(2 * 3.75 / 9 / 5));
  CHECK(p[1] == doctest::Approx((2 + 2 * 2.75 / 9) / 5));
  CHECK(p[2] == doctest::Approx((1 + 2 * 1.75 / 9) / 5));
  CHECK(p[3] == doctest::Approx(2 * 0.75 / 9 / 5));
  CHECK(std::accumulate(p.begin(), p.end(), 0.0) == doctest::Approx(1.0));
  // no history at all (position -1): the unigram level
  model.next_token_distribution({}, -1, p);
  CHECK(p[0] == doctest::Approx(3.75 / 9));

  std::vector<std::vector<int32_t>> out = model.generate({{{0}, 4, {}}, {{0}, 4, {0}}});
  CHECK(out[0] == std::vector<int32_t>{1, 0, 1, 0});
  CHECK(out[1] == std::vector<int32_t>{1});  // stops at the stop token 0
  std::vector<std::vector<TargetScore>> s = model.score({{{0, 1}, {0, 1}, {1, 0}}});
  CHECK(s[0][0].logprob == doctest::Approx(std::log((2 + 2 * 2.75 / 9) / 5)));
  CHECK(s[0][0].is_argmax);
  CHECK(s[0][1].is_argmax);
}

TEST_CASE("eval: n-gram distributions are normalised at every order") {
  NgramModel model(4, 8);
  model.add_document({1, 2, 3, 1, 2, 4, 1, 2, 3, 5, 6, 7, 1, 2, 3});
  model.add_document({7, 7, 6, 5});
  model.finalize();
  std::vector<int32_t> context = {1, 2, 3, 1, 2, 4, 7, 7, 6};
  std::vector<double> p;
  for (int pos = -1; pos < static_cast<int>(context.size()); pos++) {
    model.next_token_distribution(context, pos, p);
    CHECK(std::accumulate(p.begin(), p.end(), 0.0) == doctest::Approx(1.0).epsilon(1e-12));
  }
  CHECK_THROWS_AS(NgramModel(8, 1 << 16), hla::Error);  // 8 tokens x 16 bits > 64
}

namespace {

nlohmann::json sample_results() {
  return nlohmann::json::parse(R"({
    "name": "tiny", "model": "test model", "tokenizer": "byte",
    "lm_tasks": {
      "lambada": {"n": 10, "metrics": {"acc": 0.5, "acc_stderr": 0.1667, "perplexity": 12.345}},
      "hellaswag": {"n": 4, "metrics": {"acc": 0.25, "acc_stderr": 0.25, "acc_norm": 0.4, "acc_norm_stderr": 0.2}}
    },
    "ruler": {"lengths": [1024, 2048], "samples": 5, "token_scale": 4.0, "notes": ["no essays"],
              "tasks": {"vt": {"1024": {"score": 80.0, "metric": "string_match_all"},
                               "2048": {"score": 60.0, "metric": "string_match_all"}},
                        "qa_1": {"1024": {"score": 20.0, "metric": "string_match_part"},
                                 "2048": {"error": "out of memory"}}},
              "average": {"1024": 50.0, "2048": 60.0},
              "average_without_qa": {"1024": 80.0, "2048": 60.0},
              "averaged_tasks": {"1024": {"all": 2, "without_qa": 1}, "2048": {"all": 1, "without_qa": 1}}},
    "mqar": {"vocab_size": 258, "examples": 8,
             "cells": [{"seq_len": 64, "num_kv_pairs": 4, "accuracy": 0.75, "loss": 1.5}]}
  })");
}

}  // namespace

TEST_CASE("eval: the report has the papers' table and every section") {
  std::string md = render_report_markdown(sample_results());
  // LAMBADA ppl and acc, HellaSwag acc_norm (its reported metric), the mean of the accuracies
  CHECK(md.find("| Model | LMB. ppl ↓ | LAMBADA acc ↑ | Hella. acc_n ↑ | Avg. ↑ |\n") != std::string::npos);
  CHECK(md.find("| tiny | 12.35 | 50.00 | 40.00 | 45.00 |\n") != std::string::npos);
  CHECK(md.find("| hellaswag | 4 | 25.00 ± 25.00 | 40.00 ± 20.00 | – | acc_norm |") != std::string::npos);
  CHECK(md.find("| vt | string_match_all | 80.00 | 60.00 |") != std::string::npos);
  CHECK(md.find("| qa_1 | string_match_part | 20.00 | error |") != std::string::npos);
  CHECK(md.find("| **average** (2 tasks) |  | **50.00** | **60.00** |") != std::string::npos);
  CHECK(md.find("| **average without QA** (1 task) |  | **80.00** | **60.00** |") != std::string::npos);
  CHECK(md.find("## Failed tasks\n\n- `ruler/tasks/qa_1/2048`: out of memory\n") != std::string::npos);
  CHECK(md.find("- note: no essays") != std::string::npos);
  CHECK(md.find("| 64 | 4 | 75.00 | 1.500 |") != std::string::npos);

  std::string dir = (std::filesystem::temp_directory_path() / "hla_test_eval_report").string();
  std::filesystem::remove_all(dir);
  write_reports(sample_results(), dir);
  std::ifstream json_file(dir + "/results.json");
  CHECK(nlohmann::json::parse(json_file) == sample_results());
  CHECK(std::filesystem::exists(dir + "/report.md"));
  std::ifstream svg(dir + "/ruler.svg");
  std::string first_line;
  std::getline(svg, first_line);
  CHECK(first_line.rfind("<svg", 0) == 0);
}

TEST_CASE("eval: SVG line plot has one polyline per series") {
  std::string svg = line_plot_svg({{"a", {1024, 2048, 4096}, {90, 80, 70}}, {"b<c", {1024}, {10}}},
                                  {"T", "x", "y", true, 0, 100});
  size_t polylines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1))
    polylines++;
  CHECK(polylines == 2);
  CHECK(svg.find("b&lt;c") != std::string::npos);
  CHECK(svg.find(">4096<") != std::string::npos);  // a log2 tick
  CHECK_THROWS_AS(line_plot_svg({{"bad", {1, 2}, {1}}}, {}), hla::Error);
}

// The tick texts of a plot: the contents of every <text ... text-anchor="end"> (the y axis).
static std::vector<std::string> y_tick_labels(const std::string& svg) {
  std::vector<std::string> out;
  const std::string mark = "text-anchor=\"end\">";
  for (size_t at = svg.find(mark); at != std::string::npos; at = svg.find(mark, at + 1)) {
    const size_t begin = at + mark.size();
    out.push_back(svg.substr(begin, svg.find('<', begin) - begin));
  }
  return out;
}

TEST_CASE("eval: SVG plot ticks are round numbers over the data, and the legend fits its longest name") {
  const std::string loss = line_plot_svg({{"pure-none-muon-lr0.01-s42", {50, 300}, {4.90807, 0.0389514}}},
                                         {"loss", "step", "loss", false, 0, 0});
  CHECK(y_tick_labels(loss) == std::vector<std::string>{"0", "1", "2", "3", "4", "5"});
  CHECK(loss.find(">300<") != std::string::npos);
  CHECK(loss.find("4.90807") == std::string::npos);
  const std::string rate = line_plot_svg({{"m", {0, 0.5}, {8510.38, 13799.5}}}, {"t", "x", "tok/s", false, 0, 0});
  CHECK(y_tick_labels(rate) == std::vector<std::string>{"8000", "10000", "12000", "14000"});
  const std::string fraction = line_plot_svg({{"m", {0, 1}, {0.1, 0.35}}}, {"t", "x", "y", false, 0, 0});
  CHECK(y_tick_labels(fraction) == std::vector<std::string>{"0.10", "0.15", "0.20", "0.25", "0.30", "0.35"});
  const std::string flat = line_plot_svg({{"m", {1, 2}, {3, 3}}}, {"t", "x", "y", false, 0, 0});
  CHECK(y_tick_labels(flat).size() >= 3);  // a constant series still gets an axis with a width
  // The mean of three equal numbers can differ from them in the last bit: still a flat series.
  const double mib = 4.1337890625, mean = (mib + mib + mib) / 3 + 4 * std::numeric_limits<double>::epsilon();
  const std::string rounding = line_plot_svg({{"a", {1, 2}, {mib, mean}}}, {"t", "x", "y", false, 0, 0});
  CHECK(y_tick_labels(rounding).size() >= 3);
  CHECK(y_tick_labels(rounding).size() <= 12);
  CHECK_THROWS_AS(line_plot_svg({{"a", {0, 1024}, {1, 2}}}, {"t", "x", "y", true, 0, 0}), hla::Error);

  // The document is as wide as the plot frame plus margins that hold the widest tick and name.
  auto width = [](const std::string& svg) { return std::stod(svg.substr(svg.find("width=\"") + 7)); };
  const std::string short_name = line_plot_svg({{"a", {0, 1}, {0, 1}}}, {"t", "x", "y", false, 0, 0});
  const std::string long_name = line_plot_svg({{std::string(60, 'n'), {0, 1}, {0, 1}}}, {"t", "x", "y", false, 0, 0});
  CHECK(width(long_name) - width(short_name) > 59 * 6);
}

TEST_CASE("eval: reports on a full disk fail naming the file and keep the previous results") {
  const std::string dir = (std::filesystem::temp_directory_path() / "hla_test_eval_report_full").string();
  std::filesystem::remove_all(dir);
  write_reports(sample_results(), dir);
  auto slurp = [&](const std::string& name) {
    std::ifstream in(dir + "/" + name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string old_json = slurp("results.json"), old_md = slurp("report.md");
  nlohmann::json next = sample_results();
  next["name"] = "second run";
  const std::string message = hla::testing::error_on_full_disk([&] { write_reports(next, dir); });
  CHECK(message.find(dir + "/results.json: write failed on " + dir + "/results.json.tmp-") == 0);
  CHECK(message.find("File too large") != std::string::npos);
  CHECK(slurp("results.json") == old_json);
  CHECK(slurp("report.md") == old_md);
  CHECK(std::distance(std::filesystem::directory_iterator(dir), {}) == 3);  // results.json, report.md, ruler.svg
  std::filesystem::remove_all(dir);
}
