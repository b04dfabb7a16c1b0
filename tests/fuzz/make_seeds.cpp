// hla_fuzz_seeds OUT_DIR: the seed corpus of every fuzz target, written by the project's own
// writers (save_safetensors, ModelConfig::to_json, RunConfig's setting list, save_tokenizer_json,
// write_shard, prepare_shards) into OUT_DIR/<target>/, valid examples and near-valid ones (one
// field off, one byte short) and hostile ones (deep nesting, a huge value). Generated at build
// time, so no binary seed is committed.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "data/bpe_train.h"
#include "data/shard.h"
#include "eval/lm_tasks.h"
#include "nn/layers/mixers.h"
#include "tensor/safetensors.h"
#include "tests/fuzz/fuzz_data.h"
#include "train/run_config.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string g_out;  // OUT_DIR

void write_seed(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_out + "/" + target);
  std::ofstream(g_out + "/" + target + "/" + name, std::ios::binary | std::ios::trunc) << bytes;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Hostile variants of a valid JSON example (the issue's item 1): the value at `where` becomes
// 100,000 levels of nesting or a 3,000-character string; either must end in a short hla::Error,
// not a stack overflow or an error that quotes it whole. write(name, json_text) stores one.
template <class Write>
void hostile_json(json example, const std::string& where, Write&& write) {
  example[json::json_pointer(where)] = "@@";
  std::string text = example.dump();
  size_t at = text.find("\"@@\"");
  auto with = [&](const std::string& value) { return text.substr(0, at) + value + text.substr(at + 4); };
  write("deep_nesting", with(std::string(100000, '[') + std::string(100000, ']')));
  write("long_value", with('"' + std::string(3000, 'x') + '"'));
}

// A file written by one of the project's writers, as bytes (the file itself is removed).
template <class Writer>
std::string written_by(const std::string& file_name, Writer&& write) {
  std::string path = g_out + "/tmp-" + file_name;
  write(path);
  std::string bytes = read_bytes(path);
  fs::remove(path);
  return bytes;
}

void safetensors_seeds() {
  hla::NamedTensors tensors = {
      {"embed.weight", hla::Tensor::randn({4, 3}, 1)},
      {"norm.weight", hla::Tensor::full({3}, 1.0, hla::DType::BF16)},
      {"scale", hla::Tensor::from_f64({0.5, 2.0}, {2}, hla::DType::F64)},
      {"step", hla::Tensor::from_i32({7}, {1})},
  };
  std::string file = written_by("a.safetensors", [&](const std::string& p) {
    hla::save_safetensors(p, tensors, {{"format", "pt"}});
  });
  write_seed("safetensors", "valid", file);
  write_seed("safetensors", "no_tensors", written_by("b.safetensors", [](const std::string& p) { hla::save_safetensors(p, {}); }));
  write_seed("safetensors", "one_byte_short", file.substr(0, file.size() - 1));
  write_seed("safetensors", "trailing_byte", file + '\0');
  std::string longer_header = file;
  longer_header[0] = static_cast<char>(longer_header[0] + 1);
  write_seed("safetensors", "header_length_plus_one", longer_header);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; i--) header_bytes = header_bytes << 8 | uint8_t(file[i]);
  hostile_json(json::parse(file.substr(8, header_bytes)), "/embed.weight/dtype", [&](const std::string& name, const std::string& header) {
    std::string length(8, '\0');
    for (int i = 0; i < 8; i++) length[i] = static_cast<char>(uint64_t(header.size()) >> (8 * i));
    write_seed("safetensors", name, length + header + file.substr(8 + header_bytes));
  });
}

hla::ModelConfig small_config(const std::string& model_type) {
  hla::ModelConfig c;
  c.model_type = model_type;
  c.hidden_size = 32;
  c.num_hidden_layers = 3;
  c.num_heads = 2;
  c.vocab_size = 64;
  return c;
}

void model_config_seeds() {
  for (const hla::MixerSpec& spec : hla::mixer_table()) {
    hla::ModelConfig c = small_config(spec.model_type);
    write_seed("model_config", spec.model_type, c.to_json().dump(2));
    c.set_hybrid("3:1");
    write_seed("model_config", std::string(spec.model_type) + "_hybrid", c.to_json().dump(2));
  }
  json j = small_config("mamba2").to_json();
  j["state_size"] = 0;
  write_seed("model_config", "mamba2_state_size_0", j.dump());
  hostile_json(small_config("gla").to_json(), "/model_type",
               [](const std::string& name, const std::string& text) { write_seed("model_config", name, text); });
  j = small_config("gla").to_json();
  j["hidden_size"] = 4294967328.0;  // 2^32 + 32
  write_seed("model_config", "hidden_size_over_int", j.dump());
  j = small_config("gla").to_json();
  j.erase("model_type");
  write_seed("model_config", "no_model_type", j.dump());
}

// A run file with every setting of RunConfig's list (an empty list is left out: the flag
// behind it wants at least one value).
std::string run_file(const hla::RunConfig& config) {
  std::ostringstream toml;
  json sections = config.to_json();
  for (const auto& [section, settings] : sections.items()) {
    toml << "[" << section << "]\n";
    for (const auto& [key, value] : settings.items())
      if (!value.is_null() && value != json::array()) toml << key << " = " << value.dump() << "\n";
  }
  return toml.str();
}

void run_config_seeds() {
  hla::RunConfig config;
  write_seed("run_config", "defaults", run_file(config));
  config.data.source = "corpus.txt";
  config.model.fields.attn.layers = {1, 3};
  config.optim.optim.name = "muon";
  write_seed("run_config", "muon_text", run_file(config));
  write_seed("run_config", "unknown_key", "[train]\nsteps = 10\nstepz = 3\n");
  write_seed("run_config", "wrong_type", "[train]\nsteps = \"many\"\n[optim]\nlr = true\n");
  write_seed("run_config", "no_section", "steps = 10\n");
  write_seed("run_config", "array_table", "[[model]]\nhidden_size = 64\n[model.attn]\nlayers = [1, [2]]\n");
  write_seed("run_config", "deep_nesting", "[train]\nsteps = " + std::string(100000, '[') + std::string(100000, ']') + "\n");
  write_seed("run_config", "long_value", "[train]\ndevice = \"" + std::string(3000, 'x') + "\"\n");
}

void tokenizer_seeds() {
  std::vector<std::string> docs(8, "the quick brown fox jumps over the lazy dog; the end.");
  hla::data::BpeTrainOptions options;
  options.vocab_size = 300;
  auto bpe = hla::data::train_bpe(docs, options, "bpe:seed");
  std::string file = written_by("tokenizer.json", [&](const std::string& p) { hla::data::save_tokenizer_json(*bpe, p); });
  write_seed("tokenizer_json", "byte_level", file);
  json j = json::parse(file);
  j["added_tokens"][0]["id"] = -1;
  write_seed("tokenizer_json", "added_token_id_minus_1", j.dump());
  j = json::parse(file);
  j["model"]["merges"].push_back(j["model"]["merges"][0]);
  write_seed("tokenizer_json", "merge_twice", j.dump());
  hostile_json(json::parse(file), "/model/type",
               [](const std::string& name, const std::string& text) { write_seed("tokenizer_json", name, text); });
}

// Shard target inputs: the mode byte of fuzz_shard.cpp, then the file.
void shard_seeds() {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < 40; i++) tokens.push_back(i * 37 % 300);
  for (int bytes : {2, 4}) {
    auto shard = [&](const std::string& name) {
      return written_by(name, [&](const std::string& p) { hla::data::write_shard(p, tokens.data(), tokens.size(), bytes); });
    };
    std::string bin = shard("s.bin"), zst = shard("s.bin.zst"), tag = "u" + std::to_string(8 * bytes);
    write_seed("shard", tag + "_bin", '\0' + bin);
    write_seed("shard", tag + "_zst", '\1' + zst);
    write_seed("shard", tag + "_bin_compressed_here", '\2' + bin);
    write_seed("shard", tag + "_bin_one_byte_short", '\0' + bin.substr(0, bin.size() - 1));
    std::string huge_count = bin;  // the header claims 2^31 - 1 tokens over 40
    const int32_t claimed = INT32_MAX;
    std::memcpy(&huge_count[2 * sizeof(int32_t)], &claimed, sizeof claimed);
    write_seed("shard", tag + "_huge_count_compressed_here", '\2' + huge_count);
  }
}

void manifest_seeds() {
  std::string dir = g_out + "/tmp-shards";
  fs::remove_all(dir);
  nlohmann::ordered_json manifest = hla::fuzz::prepare_example_shards(g_out + "/tmp-corpus.txt", dir);
  fs::remove_all(dir);
  fs::remove(g_out + "/tmp-corpus.txt");
  write_seed("manifest", "prepared", manifest.dump(2));
  hostile_json(json::parse(manifest.dump()), "/tokenizer/vocab_size",
               [](const std::string& name, const std::string& text) { write_seed("manifest", name, text); });
  manifest["shards"][0]["name"] = "missing.bin";
  manifest["tokenizer"]["vocab_size"] = "258";
  write_seed("manifest", "near_valid", manifest.dump());
}

std::string jsonl(const std::vector<json>& records) {
  std::string text;
  for (const json& r : records) text += r.dump() + "\n";
  return text;
}

// Per task: the uniform layout and the Hugging Face layout, then records one field off.
void task_seeds() {
  json mc_uniform = {{"context", "Question: 2 + 2?\nAnswer:"}, {"choices", {"3", "4", "5"}}, {"gold", 1}};
  json choices = {{"text", {"red", "green", "blue", "black"}}, {"label", {"A", "B", "C", "D"}}};
  std::map<std::string, std::vector<json>> records = {
      {"arc_easy", {mc_uniform, {{"question", "Which is a color?"}, {"choices", choices}, {"answerKey", "C"}}}},
      {"hellaswag", {mc_uniform, {{"activity_label", "Baking"}, {"ctx_a", "She mixes flour."}, {"ctx_b", "then she"},
                                  {"endings", {"bakes it.", "sings.", "runs [title] away.", "sleeps."}}, {"label", "0"}}}},
      {"piqa", {mc_uniform, {{"goal", "Open a jar"}, {"sol1", "Twist the lid."}, {"sol2", "Eat the lid."}, {"label", 0}}}},
      {"openbookqa", {mc_uniform, {{"question_stem", "The sun is a"}, {"choices", choices}, {"answerKey", "A"}}}},
      {"lambada", {{{"text", "The cat sat on the mat and looked at the dog"}}, {{"text", "word"}}}},
  };
  for (auto& entry : records) {
    const std::string& task = entry.first;  // named, not bound: a lambda below captures them
    const std::vector<json>& recs = entry.second;
    write_seed("task_" + task, "valid", jsonl(recs));
    json off = recs.back();
    off[off.begin().key()] = 3;
    write_seed("task_" + task, "field_off", jsonl({recs.front(), off}) + "\n\n{\"gold\": 9}\n");
    hostile_json(recs.back(), "/" + recs.back().begin().key(), [&](const std::string& name, const std::string& text) {
      write_seed("task_" + task, name, jsonl({recs.front()}) + text + "\n");
    });
  }
}

// RULER inputs (fuzz_ruler_resources.cpp): haystack, NUL, word list; or haystack and the three
// files of a words directory.
void ruler_seeds() {
  std::string haystack = "An essay about start-ups, programming and the long summer of writing.\n";
  std::string words;
  for (char a = 'a'; a <= 'k'; a++)
    for (char b = 'a'; b <= 'k'; b++) words += std::string("w") + a + b + "\n";
  write_seed("ruler_resources", "word_list", haystack + '\0' + words);
  write_seed("ruler_resources", "words_dir", haystack + '\0' + words + '\0' + words + '\0' + "run\nwalk\n");
  write_seed("ruler_resources", "too_few_words", haystack + '\0' + "one\ntwo\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: hla_fuzz_seeds OUT_DIR\n";
    return 2;
  }
  g_out = argv[1];
  fs::create_directories(g_out);
  try {
    safetensors_seeds();
    model_config_seeds();
    run_config_seeds();
    tokenizer_seeds();
    shard_seeds();
    manifest_seeds();
    task_seeds();
    ruler_seeds();
  } catch (const std::exception& e) {
    std::cerr << "hla_fuzz_seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
