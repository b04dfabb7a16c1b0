// Bad model and run configuration as a hostile user writes it (W2.7): every value of the wrong
// type or out of range is an error naming the file, the field and the value, with no source
// location in front; an absurd model size fails before anything is allocated.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "nn/layers/mixers.h"
#include "nn/model.h"
#include "nn/weights.h"
#include "tests/test_util.h"
#include "train/run_config.h"

using namespace hla;
using hla::testing::error_of;
namespace fs = std::filesystem;

namespace {

nlohmann::json small_config() {
  return {{"model_type", "gated_deltanet"}, {"hidden_size", 64}, {"num_hidden_layers", 2},
          {"num_heads", 2},                 {"vocab_size", 100}, {"attn", {{"layers", {1}}}}};
}

// The error from_json gives for small_config() with `key` set to `value` (in "attn" when `in_attn`).
std::string config_error(const std::string& key, const nlohmann::json& value, bool in_attn = false) {
  nlohmann::json j = small_config();
  (in_attn ? j["attn"] : j)[key] = value;
  return error_of([&] { ModelConfig::from_json(j, "c.json"); });
}

std::string write_file(const std::string& name, const std::string& text) {
  std::string dir = (fs::temp_directory_path() / "hla_test_config_errors").string();
  fs::create_directories(dir);
  std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("config.json integers fit an int and are whole; booleans, numbers and strings never stand in for each other") {
  const std::string int_range = " must be an integer in [-2147483648, 2147483647], got ";
  CHECK(config_error("hidden_size", (int64_t{1} << 32) + 64) == "c.json: hidden_size" + int_range + "4294967360");
  CHECK(config_error("hidden_size", -(int64_t{1} << 32)) == "c.json: hidden_size" + int_range + "-4294967296");
  CHECK(config_error("hidden_size", 64.5) == "c.json: hidden_size" + int_range + "64.5");
  CHECK(config_error("hidden_size", true) == "c.json: hidden_size" + int_range + "true");
  CHECK(config_error("hidden_size", "64") == "c.json: hidden_size" + int_range + "\"64\"");
  CHECK(config_error("hidden_size", std::numeric_limits<uint64_t>::max()) ==
        "c.json: hidden_size" + int_range + "18446744073709551615");
  CHECK(config_error("layers", {(int64_t{1} << 32) + 1}, true) ==
        "c.json: attn.layers must be a list of integers in [-2147483648, 2147483647], got [4294967297]");
  CHECK(config_error("layers", {1.5}, true) ==
        "c.json: attn.layers must be a list of integers in [-2147483648, 2147483647], got [1.5]");
  CHECK(config_error("norm_eps", true) == "c.json: norm_eps must be a number, got true");
  CHECK(config_error("norm_eps", "1e-6") == "c.json: norm_eps must be a number, got \"1e-6\"");
  CHECK(config_error("use_short_conv", 1) == "c.json: use_short_conv must be true or false, got 1");
  CHECK(config_error("use_short_conv", "true") == "c.json: use_short_conv must be true or false, got \"true\"");
  CHECK(config_error("model_type", 3) == "c.json: model_type must be a string, got 3");
  // A long value is quoted by excerpt, never whole.
  std::string quoted = config_error("model_type", std::vector<int>(1000, 7));
  CHECK(quoted.rfind("c.json: model_type must be a string, got [7,7,7", 0) == 0);
  CHECK(quoted.size() < 200);
}

TEST_CASE("config.json errors start with the file, not with a source location") {
  CHECK(config_error("conv_size", 0) ==
        "c.json: conv_size must be >= 1 with short convolutions (model_type gated_deltanet), got 0");
  CHECK(config_error("num_heads", 3) == "c.json: num_heads 3 does not divide hidden_size 64 (or set head_dim)");
  CHECK(config_error("colour", 1) == "c.json: unknown field 'colour'");
  // A field name of 3,000 characters is quoted as an excerpt (found by the model_config fuzzer).
  const std::string long_name(3000, 'x');
  CHECK(config_error(long_name, 1) == "c.json: unknown field '" + std::string(100, 'x') + "...'");
  CHECK(config_error(long_name, 1, true) == "c.json: unknown field 'attn." + std::string(100, 'x') + "...'");
  CHECK(config_error("layers", {5}, true) == "c.json: attn.layers has index 5 outside [0, 2)");
  CHECK(config_error("num_heads", 3, true) == "c.json: attn.num_heads 3 does not divide hidden_size 64");
}

TEST_CASE("ModelConfig::load reads through the bounded JSON parser, naming the file") {
  std::string deep = write_file("deep.json", std::string(100000, '[') + std::string(100000, ']'));
  CHECK(error_of([&] { ModelConfig::load(deep); }) == deep + ": JSON nested deeper than 64 levels");
  std::string broken = write_file("broken.json", "{\"hidden_size\": ");
  CHECK(error_of([&] { ModelConfig::load(broken); }).rfind(broken + ": not valid JSON", 0) == 0);
  CHECK(error_of([&] { ModelConfig::load(broken + ".missing"); }).rfind(broken + ".missing: cannot open", 0) == 0);
}

TEST_CASE("widths that overflow an int are errors, not undefined casts") {
  CHECK(config_error("hidden_ratio", 1e30) ==
        "c.json: hidden_size 64 * hidden_ratio 1e+30 gives an MLP width of 4.26667e+31, more than 2147483647");
  nlohmann::json j = small_config();
  j["model_type"] = "gla";
  j["expand_v"] = 1e30;
  CHECK(error_of([&] { ModelConfig::from_json(j, "c.json"); }) ==
        "c.json: hidden_size 64 * expand_v 1e+30 = 6.4e+31 is more than 2147483647 channels");
}

TEST_CASE("an absurd model size fails at once, with the parameter and byte counts and the limit") {
  nlohmann::json j = small_config();
  j["num_hidden_layers"] = 1000000;
  CHECK(error_of([&] { ModelConfig::from_json(j, "c.json"); }) ==
        "c.json: num_hidden_layers must be <= 1024 (far above any published model), got 1000000");
  ModelConfig deep = ModelConfig::from_json(small_config(), "c.json");
  deep.num_hidden_layers = 1000000;
  CHECK(error_of([&] { make_model(deep, 1); }).rfind("model config: num_hidden_layers must be <= 1024", 0) == 0);

  j = small_config();
  j["hidden_size"] = 1 << 16;
  j["vocab_size"] = 1 << 18;
  j["num_hidden_layers"] = 64;
  std::string e = error_of([&] { ModelConfig::from_json(j, "c.json"); });
  CHECK(e.rfind("c.json: the model would have at least ", 0) == 0);
  CHECK(e.find(" parameters (") != std::string::npos);
  CHECK(e.find(" bytes in fp32), more than hla's limit of 17179869184 parameters (64 GiB in fp32") != std::string::npos);
  // Saturating arithmetic: counts beyond int64 are reported, never wrapped.
  j["hidden_size"] = 2147483520;
  j["num_heads"] = 1;
  j["intermediate_size"] = 2147483647;
  j["vocab_size"] = 2147483647;
  e = error_of([&] { ModelConfig::from_json(j, "c.json"); });
  CHECK(e.rfind("c.json: the model would have at least 9223372036854775807 parameters (the count overflows int64)", 0) == 0);
}


TEST_CASE("the parameter lower bound holds for every mixer, and is within 4x of the built model") {
  for (const MixerSpec& m : mixer_table()) {
    for (bool hybrid : {false, true}) {
      CAPTURE(m.model_type);
      CAPTURE(hybrid);
      nlohmann::json j = small_config();
      j["model_type"] = m.model_type;
      if (!hybrid || m.family == MixerFamily::Attention) j.erase("attn");
      ModelConfig c = ModelConfig::from_json(j, "c.json");
      int64_t built = count_parameters(make_model(c, 1)->parameters());
      CHECK(c.min_parameter_count() <= built);
      CHECK(c.min_parameter_count() * 4 >= built);
    }
  }
}

TEST_CASE("a run file is read with its TOML types kept") {
  nlohmann::json file = parse_run_file(
      "# a run\n[model]\nmodel_type = \"gla\"   # comment\nattn_layers = [1, 3,]\n\n[optim]\nlr = 3e-4\n"
      "nesterov = false\nwarmup_steps = 1_000\n[train]\nout_dir = 'runs/a b#c'\ndevice=\"cu\\\"da\"\n",
      "r.toml");
  CHECK(file == nlohmann::json::parse(R"({"model": {"model_type": "gla", "attn_layers": [1, 3]},
      "optim": {"lr": 3e-4, "nesterov": false, "warmup_steps": 1000},
      "train": {"out_dir": "runs/a b#c", "device": "cu\"da"}})"));
}

TEST_CASE("a run file's syntax errors name the file and the line") {
  auto error = [](const std::string& text) { return error_of([&] { parse_run_file(text, "r.toml"); }); };
  CHECK(error("[train]\nsteps = 5x\n") ==
        "r.toml:2: steps = 5x: not a TOML value (a \"string\", an integer, a number, true, false or a list [...])");
  CHECK(error("[train]\nsteps = 1\nsteps = 2\n") == "r.toml:3: key 'steps' is given twice in [train]");
  CHECK(error("[train]\n[train]\n") == "r.toml:2: section [train] is given twice");
  CHECK(error("[train\n") == "r.toml:1: expected ']' after the section name");
  CHECK(error("[train]\nsteps\n") == "r.toml:2: expected '=' after the key 'steps'");
  CHECK(error("[train]\nout_dir = \"runs\n") == "r.toml:2: out_dir: the string has no closing quote");
  CHECK(error("[optim]\nlr = inf\n") == "r.toml:2: lr = inf: not a TOML value (a \"string\", an integer, a number, true, false or a list [...])");
  CHECK(error("[optim]\nlr = 1e400\n") == "r.toml:2: lr = 1e400: the number is out of range");
  CHECK(error("[train]\nsteps = 99999999999999999999\n") == "r.toml:2: steps = 99999999999999999999: the number is out of range");
  CHECK(error("[model]\nattn_layers = [[1]]\n") == "r.toml:2: attn_layers: a list holds single values, not lists");
  CHECK(error("[model]\nattn_layers = [1, 2\n") == "r.toml:2: attn_layers: the list has no closing ']'");
  CHECK(error("[train]\nsteps = 1 2\n") == "r.toml:2: steps: unexpected '2' after the value");
  CHECK(error(std::string(100000, '[')) == "r.toml:1: section names are letters, digits, '_' and '-'");
  std::string missing = (fs::temp_directory_path() / "hla_no_such_run.toml").string();
  CHECK(error_of([&] { read_run_file(missing); }).rfind(missing + ": cannot open", 0) == 0);
}

TEST_CASE("run file values of the wrong type or range are errors naming the file, the key and the value") {
  auto error = [](const std::string& text) {
    RunConfig c;
    return error_of([&] { c.apply_run_file(parse_run_file(text, "r.toml"), "r.toml"); });
  };
  const std::string int64_range = " must be an integer in [-9223372036854775808, 9223372036854775807], got ";
  CHECK(error("[train]\nsteps = \"5\"\n") == "r.toml: [train] steps" + int64_range + "\"5\"");
  CHECK(error("[train]\nsteps = 2.5\n") == "r.toml: [train] steps" + int64_range + "2.5");
  CHECK(error("[train]\nsteps = true\n") == "r.toml: [train] steps" + int64_range + "true");
  CHECK(error("[data]\nseed = -1\n") == "r.toml: [data] seed must be an integer in [0, 18446744073709551615], got -1");
  CHECK(error("[optim]\nnesterov = 5\n") == "r.toml: [optim] nesterov must be true or false, got 5");
  CHECK(error("[model]\nuse_short_conv = 1\n") == "r.toml: [model] use_short_conv must be true or false, got 1");
  CHECK(error("[data]\nval_fraction = \"0.5\"\n") == "r.toml: [data] val_fraction must be a number, got \"0.5\"");
  CHECK(error("[model]\nhidden_size = 4294967552\n") ==
        "r.toml: [model] hidden_size must be an integer in [-2147483648, 2147483647], got 4294967552");
  CHECK(error("[optim]\nname = 3\n") == "r.toml: [optim] name must be a string, got 3");
  CHECK(error("[model]\nrouting = \"up\"\n") == "r.toml: [model] routing must be one of none, clvr, cler, cler_h, got 'up'");
  CHECK(error("[train]\nspeed = 1\n") ==
        "r.toml: unknown setting '[train] speed' (settings are [model], [data], [optim], [train] keys; "
        "`hla train --help` lists them)");
  CHECK(error("steps = 1\n") == "r.toml: 'steps' is outside a section ([model], [data], [optim], [train])");
  // A value the file gives is set, and marked as given; the command line's flags win.
  RunConfig c;
  c.explicitly_set = {"train.seed"};
  c.train.seed = 7;
  c.apply_run_file(parse_run_file("[train]\nsteps = 30\nseed = 9\n[optim]\nlr = 2\n", "r.toml"), "r.toml");
  CHECK(c.train.steps == 30);
  CHECK(c.train.seed == 7);
  CHECK(c.optim.optim.lr == 2.0);
  CHECK(c.explicitly_set == std::set<std::string>{"train.seed", "train.steps", "optim.lr"});
  // A model the run file's [model] section describes is checked under the file's name.
  RunConfig bad;
  bad.apply_run_file(parse_run_file("[model]\nhidden_size = 64\nnum_heads = 3\n", "r.toml"), "r.toml");
  std::string model_error = error_of([&] { bad.model_config(256); });
  CHECK_MESSAGE(model_error.rfind("r.toml [model]: ", 0) == 0, model_error);
  CHECK(error_of([&] { RunConfig().model_config(0); }).rfind("--model flags: ", 0) == 0);
}

TEST_CASE("run settings out of range are errors naming the setting and the value, with no source location") {
  auto error = [](const std::function<void(RunConfig&)>& change) {
    RunConfig c;
    change(c);
    return error_of([&] { c.validate(); });
  };
  CHECK(error([](RunConfig& c) { c.train.steps = 0; }) == "[train] steps must be >= 1, got 0");
  CHECK(error([](RunConfig& c) { c.data.batch_size = 0; }) == "[data] batch_size must be >= 1, got 0");
  CHECK(error([](RunConfig& c) { c.optim.optim.lr = -1; }) == "[optim] lr must be > 0, got -1");
  CHECK(error([](RunConfig& c) { c.optim.optim.lr = INFINITY; }) == "[optim] lr must be a finite number, got inf");
  CHECK(error([](RunConfig& c) { c.data.val_fraction = NAN; }) == "[data] val_fraction must be a finite number, got nan");
  CHECK(error([](RunConfig& c) { c.train.grad_accum = 0; }) == "[train] grad_accum must be >= 1, got 0");
  CHECK(error([](RunConfig& c) { c.data.mqar_kv_pairs = 0; }) == "[data] mqar_kv_pairs must be >= 1, got 0");
  CHECK(error([](RunConfig& c) { c.data.mqar_vocab = int64_t{1} << 32; }) ==
        "[data] mqar_vocab must be in [1, 2147483647], got 4294967296");
  CHECK(error([](RunConfig& c) {
          c.data.batch_size = int64_t{1} << 40;
          c.data.seq_len = int64_t{1} << 30;
        }) == "[data] batch_size 1099511627776 * seq_len 1073741824 * [train] grad_accum 1 tokens per update overflows int64");
  CHECK(error([](RunConfig& c) { c.data.mqar_train_examples = -1; }) == "[data] mqar_train_examples must be >= 0, got -1");
  CHECK(error([](RunConfig& c) { c.train.gpus = 0; }) == "[train] gpus must be >= 1, got 0");
  CHECK(error([](RunConfig& c) { c.train.zero = 2; }) == "[train] zero must be 0 (off) or 1 (ZeRO-1), got 2");
  CHECK(error([](RunConfig& c) { c.train.zero = 1; }) ==
        "[train] zero = 1 shards the optimizer state over the ranks of --gpus N: it needs [train] gpus > 1, got 1");
  CHECK(error([](RunConfig& c) { c.train.bucket_mb = 0; }) == "[train] bucket_mb must be > 0, got 0");
}

TEST_CASE("a --section.key flag's value has the run file's types and errors, naming the flag") {
  int64_t steps = 0;
  read_flag("30", steps, "--train.steps");
  CHECK(steps == 30);
  CHECK(error_of([&] { read_flag("2.5", steps, "--train.steps"); }) ==
        "command line: --train.steps must be an integer in [-9223372036854775808, 9223372036854775807], got 2.5");
  uint64_t seed = 0;
  CHECK(error_of([&] { read_flag("-1", seed, "--data.seed"); }) ==
        "command line: --data.seed must be an integer in [0, 18446744073709551615], got -1");
  bool nesterov = false;
  read_flag("true", nesterov, "--optim.nesterov");
  CHECK(nesterov);
  CHECK(error_of([&] { read_flag("5", nesterov, "--optim.nesterov"); }) ==
        "command line: --optim.nesterov must be true or false, got 5");
  double lr = 0;
  CHECK(error_of([&] { read_flag("1e400", lr, "--optim.lr"); }) == "command line: --optim.lr = 1e400: the number is out of range");
  CHECK(error_of([&] { read_flag("fast", lr, "--optim.lr"); }) ==
        "command line: --optim.lr = fast: not a TOML value (a \"string\", an integer, a number, true, false or a list [...])");
  std::vector<int> layers;
  read_flag("[1, 3]", layers, "--model.attn_layers");
  CHECK(layers == std::vector<int>{1, 3});
  std::string source;
  read_flag("data/#1 a.txt", source, "--data.source");
  CHECK(source == "data/#1 a.txt");
  Routing routing = Routing::None;
  read_flag("clvr", routing, "--model.routing");
  CHECK(routing == Routing::Clvr);
  CHECK(error_of([&] { read_flag("up", routing, "--model.routing"); }) ==
        "command line: --model.routing must be one of none, clvr, cler, cler_h, got 'up'");
}
