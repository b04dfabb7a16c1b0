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

using namespace hla;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

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
