// hla sweep (W2.6): the grid's expansion and its strict errors, results.csv and the report
// rendered from a hand-written table (exact cells, mean ± std), and a tiny CPU sweep that is
// killed in the middle of a run and resumed, giving the same table as an uninterrupted sweep.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "sweep/grid.h"
#include "sweep/report.h"
#include "tests/test_util.h"
#include "train/run_config.h"

using namespace hla;
using namespace hla::sweep;
using hla::testing::error_of;
namespace fs = std::filesystem;

namespace {

// MQAR with 2 pairs in 32 tokens, vocabulary 32: the data of every sweep here.
const std::string kMqarData = R"(
[data]
source = "mqar"
batch_size = 4
seq_len = 32
mqar_vocab = 32
mqar_kv_pairs = 2
)";
const std::string kShared = "\n[model]\nhidden_size = 16\nnum_hidden_layers = 4\nnum_heads = 2\n" + kMqarData +
                            "\n[train]\nsteps = 10\n";

std::vector<std::string> names_of(const std::vector<SweepRun>& runs) {
  std::vector<std::string> names;
  for (const SweepRun& r : runs) names.push_back(r.name);
  return names;
}

std::string grid_error(const std::string& sections) {
  return error_of([&] { parse_sweep(sections + kShared, "g.toml"); });
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("sweep grid: the product of the axes in grid order, the Transformer collapsed") {
  const Sweep sweep = parse_sweep(R"([grid]
model_type = ["gla", "transformer", "kda"]
hybrid = ["pure", "2:1", "LLLA"]
routing = ["none", "clvr"]
optimizer = ["adamw", "muon"]
lr_adamw = [0.001]
lr_muon = [0.0003, 0.001]
seed = [1, 2]
)" + kShared,
                                  "g.toml");
  // per linear mixer 3 hybrids x 2 routings x (1 + 2 lr) x 2 seeds = 36; the Transformer 3 x 2 = 6.
  REQUIRE(sweep.runs.size() == 36 + 6 + 36);
  CHECK(sweep.runs[0].name == "gla-pure-none-adamw-lr0.001-s1");
  CHECK(sweep.runs[1].name == "gla-pure-none-adamw-lr0.001-s2");
  CHECK(sweep.runs[2].name == "gla-pure-none-muon-lr0.0003-s1");
  CHECK(sweep.runs[6].name == "gla-pure-clvr-adamw-lr0.001-s1");
  CHECK(sweep.runs[12].name == "gla-2to1-none-adamw-lr0.001-s1");
  CHECK(sweep.runs[24].name == "gla-LLLA-none-adamw-lr0.001-s1");
  CHECK(sweep.runs[36].name == "transformer-attn-none-adamw-lr0.001-s1");
  CHECK(sweep.runs[41].name == "transformer-attn-none-muon-lr0.001-s2");
  CHECK(sweep.runs[42].name == "kda-pure-none-adamw-lr0.001-s1");
  const SweepRun& llla = sweep.runs[24];
  CHECK(llla.axes["pattern"] == "LLLA");
  CHECK(llla.axes["attn_fraction"] == 0.25);
  CHECK(llla.run_file["model"]["attn_layers"] == nlohmann::json::array({3}));
  CHECK(sweep.runs[12].axes["pattern"] == "LALA");
  CHECK(sweep.runs[12].run_file["model"]["hybrid"] == "2:1");
  CHECK(sweep.runs[36].axes["pattern"] == "AAAA");
  CHECK(sweep.runs[36].run_file["model"]["routing"] == "none");
  CHECK(sweep.runs[2].run_file["optim"]["lr"] == 0.0003);
  CHECK(sweep.runs[1].run_file["train"]["seed"] == 2);
  CHECK(sweep.runs[0].steps == 10);
  CHECK(sweep.eval_args.empty());

  SUBCASE("--only keeps the runs matching any of its globs, in grid order") {
    CHECK(names_of(select_runs(sweep.runs, "kda-pure-clvr-*-s2,transformer-*-adamw-*")) ==
          std::vector<std::string>{"transformer-attn-none-adamw-lr0.001-s1", "transformer-attn-none-adamw-lr0.001-s2",
                                   "kda-pure-clvr-adamw-lr0.001-s2", "kda-pure-clvr-muon-lr0.0003-s2",
                                   "kda-pure-clvr-muon-lr0.001-s2"});
    CHECK(select_runs(sweep.runs, "").size() == sweep.runs.size());
    CHECK(error_of([&] { select_runs(sweep.runs, "gla-*,rwkv*"); }) ==
          "--only: the pattern 'rwkv*' matches no run of the grid (78 runs; --dry-run lists them)");
  }
  SUBCASE("--dry-run lists every run with its axes") {
    const std::string text = describe_runs(select_runs(sweep.runs, "transformer-attn-none-adamw-lr0.001-s1"));
    CHECK(text == "1 run:\n  transformer-attn-none-adamw-lr0.001-s1  mixer=transformer hybrid=transformer "
                  "pattern=AAAA attn_fraction=1.0 routing=none optimizer=adamw lr=0.001 seed=1\n");
  }
}

TEST_CASE("sweep grid: axes not on the grid come from the shared sections; [eval] becomes hla eval flags") {
  const Sweep sweep = parse_sweep(R"([grid]
model_type = "delta_net"
[eval]
tasks = "mqar,ruler"
length = [256, 512]
mqar_grid = "64x4"
token_scale = 2.0
max_length = 1024
)" + kShared + "\n[optim]\nname = \"muon\"\nlr = 0.02\n",
                                  "g.toml");
  REQUIRE(sweep.runs.size() == 1);
  CHECK(sweep.runs[0].name == "delta_net-pure-none-muon-lr0.02-s42");
  CHECK(sweep.eval_args == std::vector<std::string>{"--length", "256,512", "--max-length", "1024", "--mqar-grid", "64x4",
                                                    "--tasks", "mqar,ruler", "--token-scale", "2.0"});
}

TEST_CASE("sweep grid: strict errors name the file, the section and the key") {
  CHECK(grid_error("[grid]\nmodel_typ = [\"gla\"]\n") ==
        "g.toml: unknown setting '[grid] model_typ' (grid keys: model_type, hybrid, routing, optimizer, lr, "
        "lr_adamw, lr_muon, seed)");
  CHECK(grid_error("[grid]\nlr = [\"fast\"]\n") == "g.toml: [grid] lr must be a number, got \"fast\"");
  CHECK(grid_error("[grid]\nseed = [1, -2]\n") == "g.toml: [grid] seed must be an integer in [0, 18446744073709551615], got -2");
  CHECK(grid_error("[grid]\nhybrid = []\n") == "g.toml: [grid] hybrid is an empty list (give at least one value)");
  CHECK(grid_error("[grid]\nseed = [1, 1]\n") == "g.toml: [grid] seed: the value 1 is given twice");
  CHECK(grid_error("[grid]\nhybrid = [\"LLA\"]\n") ==
        "g.toml: [grid] hybrid \"LLA\" has 3 layers, the model 4 (num_hidden_layers)");
  CHECK(grid_error("[grid]\nlr_muon = [0.001]\n") == "g.toml: [grid] lr_muon is given but no run uses muon");
  CHECK(grid_error("[grid]\nseed = [1]\n[eval]\nmqar_grid = \"64x4\"\n") ==
        "g.toml: [eval] has settings but no tasks (give tasks = \"mqar\", \"ruler\", ... or drop [eval])");
  CHECK(grid_error("[eval]\ntasks = \"mqar\"\nsampels = 3\n").rfind("g.toml: unknown setting '[eval] sampels'", 0) == 0);
  CHECK(grid_error("[eval]\ntasks = \"mqar\"\nlimit = 2.5\n") == "g.toml: [eval] limit must be an integer in [-9223372036854775808, 9223372036854775807], got 2.5");
  CHECK(error_of([] { parse_sweep("[grid]\nmodel_type = [\"gla\"]\n[model]\nmodel_type = \"kda\"\n", "g.toml"); }) ==
        "g.toml: [grid] model_type and [model] model_type are both given (the grid sets it per run; drop one)");
  CHECK(error_of([] { parse_sweep("[train]\nout_dir = \"x\"\n", "g.toml"); }) ==
        "g.toml: [train] out_dir is set by the sweep (each run writes to <--out>/<run name>); drop it");
  CHECK(error_of([] { parse_sweep("[train]\nstepz = 3\n", "g.toml"); }).rfind("g.toml: unknown setting '[train] stepz'", 0) == 0);
  CHECK(grid_error("[grid]\nmodel_type = [\"gla\", \"nope\"]\n").rfind("g.toml: a run of the grid (", 0) == 0);
  CHECK(grid_error("[grid]\nmodel_type = [\"gla\", \"nope\"]\n").find("nope") != std::string::npos);
}

TEST_CASE("sweep recipes: every configs/sweeps file parses, and text tasks score in a context their items fit") {
  // paper1-text once failed every run's eval on the H200: PIQA solutions of 342 bytes in a context
  // of 256 (the training seq_len) before [eval] max_length existed.
  size_t recipes = 0;
  for (const auto& entry : fs::directory_iterator(std::string(HLA_SOURCE_DIR) + "/configs/sweeps")) {
    if (entry.path().extension() != ".toml") continue;
    CAPTURE(entry.path().string());
    const Sweep sweep = read_sweep_file(entry.path().string());
    CHECK(!sweep.runs.empty());
    const auto& args = sweep.eval_args;
    const auto flag = [&](const std::string& name) { return std::find(args.begin(), args.end(), name); };
    if (flag("--tasks") != args.end() && flag("--tasks")[1].find("piqa") != std::string::npos) {
      REQUIRE(flag("--max-length") != args.end());
      CHECK(std::stoi(flag("--max-length")[1]) >= 1024);
    }
    recipes++;
  }
  CHECK(recipes == 4);
}

TEST_CASE("sweep run files round-trip through the strict reader") {
  const nlohmann::json sections = {{"model", {{"model_type", "gla"}, {"attn_layers", {1, 3}}, {"expand_v", 1.0}}},
                                   {"data", {{"source", "a \"quoted\" \\ path\twith tab"}}},
                                   {"optim", {{"lr", 0.0003}, {"nesterov", false}}},
                                   {"train", {{"steps", 7}}}};
  const std::string text = run_file_text(sections);
  CHECK(text.rfind("[model]\nattn_layers = [1,3]\nexpand_v = 1.0\nmodel_type = \"gla\"\n\n[data]\n", 0) == 0);
  CHECK(parse_run_file(text, "run.toml") == sections);
}

TEST_CASE("sweep results.csv: quoting round-trips; bad files fail by line") {
  ResultTable t = table_of_rows({nlohmann::ordered_json{{"run", "a"}, {"loss", 1.5}, {"note", "x, \"y\""}},
                                 nlohmann::ordered_json{{"run", "b"}, {"extra", true}}});
  CHECK(t.columns == std::vector<std::string>{"run", "loss", "note", "extra"});
  const std::string csv = csv_text(t);
  CHECK(csv == "run,loss,note,extra\na,1.5,\"x, \"\"y\"\"\",\nb,,,true\n");
  const ResultTable back = parse_csv(csv, "r.csv");
  CHECK(back.columns == t.columns);
  CHECK(back.rows == t.rows);
  CHECK(error_of([] { parse_csv("a,b\n1,2,3\n", "r.csv"); }) == "r.csv: row 1 has 3 cells, the header 2");
  CHECK(error_of([] { parse_csv("a,b\n1,\"2\n", "r.csv"); }) == "r.csv:2: the quoted cell opened here has no closing quote");
}

// A fresh sweep directory holding only `csv` as results.csv, its report rendered (--report).
static std::string report_from_csv(const std::string& name, const std::string& csv) {
  const std::string dir =
      (fs::temp_directory_path() / ("hla-test-sweep-" + name + "-" + std::to_string(getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/results.csv") << csv;
  write_report_from_csv(dir);
  return dir;
}

TEST_CASE("sweep rankings: ties print as '=', Kendall's tau-b counts them, an all-tied order is no order") {
  const std::string csv =
      "run,status,mixer,hybrid,pattern,attn_fraction,routing,optimizer,lr,seed,final_val_loss,lm_avg\n"
      "a-pure,done,a,pure,LL,0,none,adamw,0.001,1,2.0,30\n"
      "b-pure,done,b,pure,LL,0,none,adamw,0.001,1,2.1,30\n"
      "c-pure,done,c,pure,LL,0,none,adamw,0.001,1,2.2,30\n"
      "a-2to1,done,a,2:1,LA,0.5,none,adamw,0.001,1,1.9,40\n"
      "b-2to1,done,b,2:1,LA,0.5,none,adamw,0.001,1,1.9,35\n"
      "c-2to1,done,c,2:1,LA,0.5,none,adamw,0.001,1,2.0,35\n";
  const std::string dir = report_from_csv("ties", csv);
  const std::string md = read_text(dir + "/report.md");
  // Every pure LM average ties (as every mixer's 0 % RULER did in paper1-text): no order to compare.
  CHECK(md.find("| LM avg (%) | 2:1 | a = b = c | a > b = c | n/a (all tied) | n/a |\n") != std::string::npos);
  // tau-b: pairs (a,c) and (b,c) agree, (a,b) ties in the hybrid: 2 / sqrt(3 * 2) = 0.82.
  CHECK(md.find("| val loss | 2:1 | a > b > c | a = b > c | 0.82 | no |\n") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("sweep report from a hand-written results.csv: tables with mean ± std, routing deltas, rankings") {
  const std::string csv =
      "run,status,mixer,hybrid,pattern,attn_fraction,routing,optimizer,lr,seed,final_val_loss,mqar_avg,tokens_per_s,"
      "val_loss_curve\n"
      "gla-pure-none-s1,done,gla,pure,LL,0,none,adamw,0.001,1,2.0,20,1000,10:3.0 20:2.0\n"
      "gla-pure-none-s2,done,gla,pure,LL,0,none,adamw,0.001,2,2.2,30,1100,10:3.1 20:2.2\n"
      "gla-2to1-none-s1,done,gla,2:1,LA,0.5,none,adamw,0.001,1,1.8,90,900,\n"
      "gla-2to1-none-s2,done,gla,2:1,LA,0.5,none,adamw,0.001,2,1.9,94,950,\n"
      "kda-pure-none-s1,done,kda,pure,LL,0,none,adamw,0.001,1,1.9,80,800,\n"
      "kda-pure-none-s2,done,kda,pure,LL,0,none,adamw,0.001,2,1.7,84,820,\n"
      "kda-pure-clvr-s1,done,kda,pure,LL,0,clvr,adamw,0.001,1,1.8,86,780,\n"
      "kda-pure-clvr-s2,done,kda,pure,LL,0,clvr,adamw,0.001,2,1.6,88,790,\n"
      "kda-2to1-none-s1,done,kda,2:1,LA,0.5,none,adamw,0.001,1,1.7,96,700,\n"
      "kda-2to1-none-s2,\"failed: train exited with status 1 (x/train.log: diverged)\",kda,2:1,LA,0.5,none,adamw,"
      "0.001,2,,,,\n";
  const std::string dir = report_from_csv("report", csv);
  const std::string md = read_text(dir + "/report.md");
  auto has = [&](const std::string& line) {
    INFO(line);
    CHECK(md.find(line + "\n") != std::string::npos);
  };
  has("10 runs, 5 settings (cells: mean ± sample std over seeds). Accuracies and scores in %; losses in nats per "
      "token; hybrid shows the layer pattern (L linear, A attention).");
  has("| mixer | hybrid | routing | seeds | MQAR avg (%) | val loss | tokens/s |");
  has("| gla | pure (LL) | none | 2 | 25.0 ± 7.1 | 2.100 ± 0.141 | 1050 ± 71 |");
  has("| gla | 2:1 (LA) | none | 2 | 92.0 ± 2.8 | 1.850 ± 0.071 | 925 ± 35 |");
  has("| kda | pure (LL) | clvr | 2 | 87.0 ± 1.4 | 1.700 ± 0.141 | 785 ± 7 |");
  has("| kda | 2:1 (LA) | none | 1 | 96.0 | 1.700 | 700 |");  // the failed seed is left out
  has("| mixer | hybrid | optimizer | none | clvr (Δ vs none) |");
  has("| kda | pure (LL) | adamw | 1.800 ± 0.141 | 1.700 ± 0.141 (-0.100) |");
  has("| gla | pure (LL) | adamw | 2.100 ± 0.141 | – |");
  has("| MQAR accuracy (%) | 2:1 | kda > gla | kda > gla | 1.00 | yes |");
  has("| val loss | 2:1 | kda > gla | kda > gla | 1.00 | yes |");
  has("- kda-2to1-none-s2: failed: train exited with status 1 (x/train.log: diverged)");
  has("![val_loss_gla.svg](val_loss_gla.svg)");
  // The plots: recall per mixer at each ratio, and the loss curves of the runs that have one.
  const std::string recall = read_text(dir + "/recall_vs_ratio.svg");
  CHECK(recall.find("Recall vs attention ratio, per mixer") != std::string::npos);
  CHECK(recall.find("attention layers / all layers (fraction)") != std::string::npos);
  CHECK(recall.find(">kda</text>") != std::string::npos);
  const std::string curves = read_text(dir + "/val_loss_gla.svg");
  CHECK(curves.find(">pure-none-s1</text>") != std::string::npos);
  CHECK(curves.find(">pure-none-s2</text>") != std::string::npos);
  CHECK(!fs::exists(dir + "/val_loss_kda.svg"));  // no kda run has a curve
  CHECK(!fs::exists(dir + "/lm_vs_recall.svg"));  // no LM tasks
  fs::remove_all(dir);
}

// ---------------------------------------------------------------- end to end

namespace {

const std::string kTinySweep = R"([grid]
model_type = ["gated_deltanet", "gla"]
hybrid = "2:1"
[eval]
tasks = "mqar"
mqar_grid = "32x2"
mqar_examples = 8
mqar_vocab = 32
[model]
hidden_size = 16
num_hidden_layers = 2
num_heads = 2
intermediate_size = 32
vocab_size = 258
)" + kMqarData + R"(
[optim]
name = "adamw"
lr = 0.003
[train]
steps = 300
log_every = 1000
val_every = 100
val_batches = 2
save_every = 10
)";

// Starts `hla sweep ARGS...` in its own process group, output to `log`.
pid_t start_sweep(const std::vector<std::string>& args, const std::string& log) {
  std::fflush(nullptr);  // else the child's freopen writes this process's buffered output again
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    setpgid(0, 0);
    std::vector<std::string> all = {HLA_BINARY, "sweep"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (!freopen(log.c_str(), "a", stdout) || dup2(fileno(stdout), 2) < 0) _exit(126);
    execv(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Step lines in a run's metrics.jsonl.
int steps_logged(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find("\"tokens_per_s\"") != std::string::npos;
  return n;
}

// The table without the columns that measure time and memory (they differ from run to run).
ResultTable without_timing(ResultTable t) {
  const std::set<std::string> timing = {"tokens_per_s", "step_ms", "peak_gpu_gib", "peak_rss_mib", "train_seconds",
                                        "eval_seconds"};
  ResultTable out;
  for (size_t c = 0; c < t.columns.size(); c++)
    if (!timing.count(t.columns[c])) out.columns.push_back(t.columns[c]);
  for (size_t r = 0; r < t.rows.size(); r++) {
    out.rows.emplace_back();
    for (const std::string& c : out.columns) out.rows.back().push_back(t.cell(r, c));
  }
  return out;
}

}  // namespace

TEST_CASE("sweep end to end: a sweep killed mid-run resumes to the same results as an uninterrupted one") {
  const std::string root = (fs::temp_directory_path() / ("hla-test-sweep-e2e-" + std::to_string(getpid()))).string();
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string grid = root + "/grid.toml";
  std::ofstream(grid) << kTinySweep;

  // pass 1: uninterrupted, both runs at once.
  REQUIRE(wait_exit(start_sweep({"--config", grid, "--out", root + "/whole", "--parallel", "2"}, root + "/whole.log")) == 0);
  const std::string whole_csv = read_text(root + "/whole/results.csv");

  // pass 2: killed (the sweep and its child train together) once the second run has passed a
  // checkpoint, then resumed.
  const std::string second = root + "/killed/runs/gla-2to1-none-adamw-lr0.003-s42";
  const pid_t pid = start_sweep({"--config", grid, "--out", root + "/killed"}, root + "/killed.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (steps_logged(second + "/metrics.jsonl") < 25 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  kill(-pid, SIGKILL);
  wait_exit(pid);
  for (int i = 0; i < 500 && kill(-pid, 0) == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(fs::exists(second + "/checkpoint/trainer_state.json"));
  REQUIRE(!fs::exists(second + "/row.json"));  // killed before the run finished
  // Without --resume the directory is refused.
  CHECK(wait_exit(start_sweep({"--config", grid, "--out", root + "/killed"}, root + "/refused.log")) == 1);
  CHECK(read_text(root + "/refused.log").find("already holds a sweep") != std::string::npos);

  REQUIRE(wait_exit(start_sweep({"--config", grid, "--out", root + "/killed", "--resume"}, root + "/resume.log")) == 0);
  const std::string resume_log = read_text(root + "/resume.log");
  CHECK(resume_log.find("gated_deltanet-2to1-none-adamw-lr0.003-s42: done, skipped") != std::string::npos);
  CHECK(resume_log.find("gla-2to1-none-adamw-lr0.003-s42: resuming at step ") != std::string::npos);
  CHECK(read_text(second + "/train.log").find("resumed from ") != std::string::npos);

  const ResultTable whole = parse_csv(whole_csv, "whole/results.csv");
  const ResultTable resumed = parse_csv(read_text(root + "/killed/results.csv"), "killed/results.csv");
  REQUIRE(whole.rows.size() == 2);
  CHECK(whole.cell(0, "run") == "gated_deltanet-2to1-none-adamw-lr0.003-s42");
  CHECK(whole.cell(1, "run") == "gla-2to1-none-adamw-lr0.003-s42");
  CHECK(whole.cell(1, "status") == "done");
  CHECK(whole.cell(1, "val_loss_curve").rfind("100:", 0) == 0);
  CHECK(!whole.cell(1, "mqar.32x2").empty());
  CHECK(!whole.cell(1, "tokens_per_s").empty());
  // Decoding one attention layer's KV cache costs 2 (K, V) x 2 heads x 8 dims x 4 bytes per token.
  CHECK(whole.cell(1, "decode_kv_bytes_per_token") == "128");
  // Bit-exact: every loss, curve and accuracy cell is the same text (shortest exact form).
  const ResultTable a = without_timing(whole), b = without_timing(resumed);
  CHECK(a.columns == b.columns);
  for (size_t r = 0; r < a.rows.size(); r++)
    for (size_t c = 0; c < a.columns.size(); c++) {
      INFO(a.cell(r, "run"), " ", a.columns[c]);
      CHECK(a.rows[r][c] == b.rows[r][c]);
    }
  // --report rebuilds report.md from results.csv alone.
  const std::string report = read_text(root + "/killed/report.md");
  fs::remove(root + "/killed/report.md");
  REQUIRE(wait_exit(start_sweep({"--report", root + "/killed"}, root + "/report.log")) == 0);
  CHECK(read_text(root + "/killed/report.md") == report);
  fs::remove_all(root);
}
