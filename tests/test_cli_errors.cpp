// The hla binary's top-level error handler (cli/main.cpp), run as a user runs it: a bad input
// file ends in one "error: <file>: ..." line and a non-zero exit, never in a message that starts
// with an hla source location or in a crash. Also the files the bench commands write, read back.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct Run {
  int exit_code;
  std::string output;  // stdout and stderr together
};

// Runs `HLA_BINARY args` through the shell and collects what it printed.
Run run_hla(const std::string& args) {
  const std::string command = std::string(HLA_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int status = pclose(pipe);
  REQUIRE(WIFEXITED(status));
  return {WEXITSTATUS(status), output};
}

// The line of `output` that starts with "error: " (the handler prints exactly one).
std::string error_line(const std::string& output) {
  std::istringstream lines(output);
  std::string found;
  int count = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("error: ", 0) == 0) found = line, count++;
  CHECK(count == 1);
  return found;
}

// "error: tensor/json.h:40: ..." or "error: ../nn/config.cpp:77: ...": an hla source location
// where the user expects the name of their file.
bool starts_with_source_location(const std::string& line) {
  static const std::regex location(R"(^error: [^ ]*\.(cpp|h|cu):[0-9]+:)");
  return std::regex_search(line, location);
}

struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("hla_test_cli_" + std::to_string(getpid()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& bytes) const {
    const fs::path file = path / name;
    fs::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << bytes;
    return file.string();
  }
};

}  // namespace

TEST_CASE("the source-location pattern matches what HLA_CHECK prints and nothing a user file is named") {
  CHECK(starts_with_source_location("error: ../nn/config.cpp:77: ck/config.json: hidden_size must be positive"));
  CHECK(starts_with_source_location("error: tensor/json.h:40: x"));
  CHECK_FALSE(starts_with_source_location("error: runs/a.toml: [train] steps must be an integer"));
  CHECK_FALSE(starts_with_source_location("error: ck/model.safetensors: bad header length 9"));
}

TEST_CASE("hla train: a bad run file is one error line naming the file and setting, exit 1") {
  ScratchDir dir;
  const std::string toml = dir.write("bad.toml", "[train]\nsteps = \"many\"\n");
  const Run run = run_hla("train --config " + toml);
  CAPTURE(run.output);
  CHECK(run.exit_code == 1);
  const std::string line = error_line(run.output);
  CHECK(line.rfind("error: " + toml + ": [train] steps must be an integer", 0) == 0);
  CHECK(line.find("got \"many\"") != std::string::npos);
  CHECK_FALSE(starts_with_source_location(line));
}

TEST_CASE("hla eval: a bad config.json or model.safetensors names the file, without a source location") {
  ScratchDir dir;
  const std::string ppl = dir.write("held_out.txt", "hello world\n");
  const std::string config = dir.write("ck/config.json", R"({"model_type":"gla","hidden_size":-3})");
  Run run = run_hla("eval --checkpoint " + (dir.path / "ck").string() + " --ppl-file " + ppl);
  CAPTURE(run.output);
  CHECK(run.exit_code == 1);
  std::string line = error_line(run.output);
  CHECK(line.rfind("error: " + config + ": hidden_size must be >= 1, got -3", 0) == 0);
  CHECK_FALSE(starts_with_source_location(line));

  // A valid config with a weight file whose header length (1,000,000) exceeds the file.
  dir.write("ck/config.json", R"({"model_type":"gla","hidden_size":64,"num_hidden_layers":1,"num_heads":2,"vocab_size":300})");
  const std::string weights = dir.write("ck/model.safetensors", std::string("\x40\x42\x0f\0\0\0\0\0{}", 10));
  run = run_hla("eval --checkpoint " + (dir.path / "ck").string() + " --ppl-file " + ppl);
  CAPTURE(run.output);
  CHECK(run.exit_code == 1);
  line = error_line(run.output);
  CHECK(line == "error: " + weights + ": bad header length 1000000 (file has 2 bytes after the length)");
}

TEST_CASE("hla: a missing input file is a non-zero exit naming the file") {
  ScratchDir dir;
  const std::string missing = (dir.path / "missing.toml").string();
  const Run run = run_hla("train --config " + missing);
  CAPTURE(run.output);
  CHECK(run.exit_code != 0);
  CHECK(run.output.find(missing) != std::string::npos);
}

TEST_CASE("hla bench: a bad --anchors or --table file is one error line naming the file and field, before any GPU work") {
  ScratchDir dir;
  const std::string anchors = dir.write("anchors.json", R"({"rows": {"attention B4 T4096 H16 D128": {"fwd_ms": 0.5}}})");
  Run run = run_hla("bench attention --anchors " + anchors);
  CAPTURE(run.output);
  CHECK(run.exit_code == 1);
  CHECK(error_line(run.output) == "error: " + anchors + ": rows.'attention B4 T4096 H16 D128': missing field 'anchor'");

  const std::string table = dir.write("results.json", R"({"rows": [{"name": "x"}]})");
  run = run_hla("bench --table " + table);
  CAPTURE(run.output);
  CHECK(run.exit_code == 1);
  CHECK(error_line(run.output) == "error: " + table + ": rows[0]: missing field 'group'");

  // --list --json writes the rows unmeasured, and --table reads that file back.
  const std::string cases = (dir.path / "cases.json").string();
  run = run_hla("bench gdn2 --list --json " + cases);
  CHECK(run.exit_code == 0);
  run = run_hla("bench --table " + cases);
  CAPTURE(run.output);
  CHECK(run.exit_code == 0);
  CHECK(run.output.find("delta_rule gdn2 B8 T2048 H4 D256") != std::string::npos);
  CHECK(run.output.find("fla chunk_gdn2 (targets.md)") != std::string::npos);
  CHECK(run.output.find("fla chunk_gdn2 (no figure)") != std::string::npos);
}

TEST_CASE("hla bench train: the presets, an unknown name, and a CPU run's table and JSON") {
  Run run = run_hla("bench train --list");
  CAPTURE(run.output);
  CHECK(run.exit_code == 0);
  for (const char* preset : {"transformer-374m", "gdn-3:1-4x256", "gdn-3:1-8x128", "gdn-pure", "kda-3:1", "mqar-small"})
    CHECK(run.output.find(std::string("| ") + preset + " |") != std::string::npos);

  run = run_hla("bench train --models nope");
  CAPTURE(run.output);
  CHECK(run.exit_code == 1);
  CHECK(error_line(run.output).rfind("error: --models: 'nope' is neither a preset (transformer-374m, ", 0) == 0);

  // The MQAR preset at 4 sequences instead of its 32: its shape changed, so it has no target.
  ScratchDir dir;
  const std::string json = (dir.path / "train.json").string();
  run = run_hla("bench train --device cpu --dtype f32 --models mqar-small --steps 12 --batch 4 --out " +
                (dir.path / "runs").string() + " --json " + json + " --commit c1");
  CAPTURE(run.output);
  REQUIRE(run.exit_code == 0);
  std::ifstream in(json);
  const nlohmann::json table = nlohmann::json::parse(in);
  CHECK(table["commit"] == "c1");
  REQUIRE(table["rows"].size() == 1);
  const nlohmann::json& row = table["rows"][0];
  CHECK(row["name"] == "mqar-small");
  CHECK(row["gpus"] == 1);
  CHECK(row["sequences_per_update"] == 4);
  CHECK(row["seq_len"] == 64);
  const double tokens_per_s = row["tokens_per_s"].get<double>();
  CHECK(tokens_per_s > 0);
  CHECK(row["ms_per_update"].get<double>() == doctest::Approx(1000.0 * 4 * 64 / tokens_per_s).epsilon(1e-12));
  CHECK(row["speedup"].get<double>() == 1.0);
  CHECK(row["target_tokens_per_s"].is_null());
  CHECK(row["commit"] == "c1");
  CHECK(run.output.find("| mqar-small | 1 | 4 x 64 |") != std::string::npos);
}
