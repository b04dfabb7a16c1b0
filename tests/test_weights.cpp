// Model weights and JSON files (nn/weights.h): save -> load is bit-exact for every parameter
// dtype, a missing / extra tensor or a wrong shape / dtype fails naming the file and the tensor
// and leaves the parameters as they were, and a JSON write that cannot finish keeps the file
// that was there.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "nn/weights.h"
#include "tensor/safetensors.h"

using namespace hla;
namespace fs = std::filesystem;

namespace {

struct ScratchDir {
  std::string path = (fs::temp_directory_path() / ("hla_test_weights_" + std::to_string(getpid()))).string();
  ScratchDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
};

// fla names, one bf16 tensor among the fp32 ones (as a bf16 run saves its norms).
ParameterList small_model(uint64_t seed) {
  return {{"model.embeddings.weight", Var(Tensor::randn({6, 4}, seed, 0.5, DType::F32), true)},
          {"model.layers.0.attn.q_proj.weight", Var(Tensor::randn({4, 4}, seed + 1, 0.3, DType::BF16), true)},
          {"model.norm.weight", Var(Tensor::randn({4}, seed + 2, 1.0, DType::F32), true)}};
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// doctest's matcher for "the message contains `part`", from a std::string.
doctest::Contains has(const std::string& part) { return doctest::Contains(part.c_str()); }

}  // namespace

TEST_CASE("weights: save -> load round-trips bit-exactly, in fla names and order, format pt") {
  ScratchDir dir;
  ParameterList saved = small_model(1), loaded = small_model(50);
  REQUIRE_FALSE(bit_equal(saved[0].var.value(), loaded[0].var.value()));
  save_model_weights(dir.path, saved);
  load_model_weights(dir.path, loaded);
  for (size_t i = 0; i < saved.size(); i++) {
    CAPTURE(saved[i].name);
    CHECK(bit_equal(saved[i].var.value(), loaded[i].var.value()));
  }
  SafetensorsFile file = load_safetensors(dir.path + "/model.safetensors");
  REQUIRE(file.tensors.size() == 3);
  CHECK(file.tensors[1].first == "model.layers.0.attn.q_proj.weight");
  CHECK(file.tensors[1].second.dtype() == DType::BF16);
  CHECK(file.metadata.at("format") == "pt");
}

TEST_CASE("weights: a missing, extra, reshaped or retyped tensor fails naming the file and tensor") {
  ScratchDir dir;
  save_model_weights(dir.path, small_model(1));
  const std::string file = dir.path + "/model.safetensors";
  ParameterList target = small_model(50);
  const Tensor before = target[0].var.value().clone();

  ParameterList more = small_model(50);
  more.push_back({"lm_head.weight", Var(Tensor::zeros({6, 4}, DType::F32), true)});
  CHECK_THROWS_WITH_AS(load_model_weights(dir.path, more),
                       has(file + ": no tensor named 'lm_head.weight'"), Error);

  ParameterList fewer = small_model(50);
  fewer.pop_back();
  CHECK_THROWS_WITH_AS(load_model_weights(dir.path, fewer),
                       has(file + ": tensor 'model.norm.weight' is not a parameter of this model"), Error);

  ParameterList reshaped = small_model(50);
  reshaped[0].var = Var(Tensor::zeros({4, 6}, DType::F32), true);
  CHECK_THROWS_WITH_AS(
      load_model_weights(dir.path, reshaped),
      has(file + ": tensor 'model.embeddings.weight' has shape (6, 4) but the model expects (4, 6)"), Error);

  ParameterList retyped = target;
  retyped[0].var = Var(Tensor::zeros({6, 4}, DType::BF16), true);  // fp32 weights never narrow
  CHECK_THROWS_WITH_AS(
      load_model_weights(dir.path, retyped),
      has(file + ": tensor 'model.embeddings.weight' is F32 but the model expects BF16"), Error);
  CHECK(bit_equal(target[0].var.value(), before));  // a failed load copied nothing

  ParameterList widened = small_model(50);  // bf16 weights load into fp32 master weights, exactly
  widened[1].var = Var(Tensor::zeros({4, 4}, DType::F32), true);
  load_model_weights(dir.path, widened);
  CHECK(bit_equal(widened[1].var.value(), small_model(1)[1].var.value().to(DType::F32)));

  CHECK_THROWS_WITH_AS(load_model_weights(dir.path + "/nowhere", target),
                       has(dir.path + "/nowhere: no model.safetensors"), Error);
}

TEST_CASE("weights: NaN or Inf in a saved tensor fails naming the tensor and the first bad index") {
  ScratchDir dir;
  const std::string file = dir.path + "/model.safetensors";
  ParameterList target = small_model(50);
  const Tensor before = target[0].var.value().clone();

  ParameterList with_nan = small_model(1);
  with_nan[0].var.mutable_value().data<float>()[13] = std::nanf("");
  with_nan[0].var.mutable_value().data<float>()[20] = INFINITY;
  save_model_weights(dir.path, with_nan);
  CHECK_THROWS_WITH_AS(load_model_weights(dir.path, target),
                       has(file + ": tensor 'model.embeddings.weight' holds nan at index 13 of 24"), Error);
  CHECK(bit_equal(target[0].var.value(), before));  // a failed load copied nothing

  ParameterList with_inf = small_model(1);
  with_inf[1].var = Var(Tensor::from_f64(std::vector<double>(16, 0.5), {4, 4}, DType::BF16), true);
  with_inf[1].var.mutable_value().data<bf16>()[7] = Tensor::full({}, -INFINITY, DType::BF16).data<bf16>()[0];
  save_model_weights(dir.path, with_inf);
  CHECK_THROWS_WITH_AS(load_model_weights(dir.path, target),
                       has(file + ": tensor 'model.layers.0.attn.q_proj.weight' holds -inf at index 7 of 16"), Error);
}

TEST_CASE("weights: a failed save keeps the previous weights file") {
  ScratchDir dir;
  ParameterList first = small_model(1);
  save_model_weights(dir.path, first);
  const std::string tmp = dir.path + "/model.safetensors.tmp-" + std::to_string(getpid());
  fs::create_directories(tmp);  // the temporary file cannot be opened
  CHECK_THROWS_WITH_AS(save_model_weights(dir.path, small_model(2)),
                       has(dir.path + "/model.safetensors: cannot create " + tmp), Error);
  ParameterList loaded = small_model(50);
  load_model_weights(dir.path, loaded);
  CHECK(bit_equal(loaded[0].var.value(), first[0].var.value()));
}

TEST_CASE("weights: JSON files round-trip, and a failed write keeps the old file") {
  ScratchDir dir;
  const std::string path = dir.path + "/config.json";
  nlohmann::json config = {{"model_type", "gla"}, {"hidden_size", 96}, {"rope_theta", 10000.0}};
  write_json_file(path, config);
  CHECK(read_json_file(path) == config);
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  CHECK_FALSE(fs::exists(tmp));

  fs::create_directories(tmp);  // the temporary file cannot be created
  CHECK_THROWS_WITH_AS(write_json_file(path, {{"model_type", "other"}}),
                       has(path + ": cannot create " + tmp + " (Is a directory); " + path + " is unchanged"), Error);
  CHECK(read_json_file(path) == config);

  std::ofstream(dir.path + "/broken.json") << "{\"model_type\": ";
  CHECK_THROWS_WITH_AS(read_json_file(dir.path + "/broken.json"), has(dir.path + "/broken.json: not valid JSON"),
                       Error);
  CHECK_THROWS_WITH_AS(read_json_file(dir.path + "/absent.json"), has(dir.path + "/absent.json: cannot open (No such file or directory)"),
                       Error);
}
