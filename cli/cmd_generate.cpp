// `hla generate`: text from a checkpoint with the decoding state (nn/decode.h): the prompt is
// prefilled once, then every new token is one step on the fixed-size state and KV caches.
//
//   hla generate --checkpoint runs/x --prompt "Once upon a time" --max-new-tokens 200
//   hla generate --checkpoint runs/x --prompts prompts.jsonl --batch-size 16 --device cuda
//
// One --prompt streams its completion to stdout as the tokens come. --prompts reads JSONL
// objects with a "prompt" string, decodes them in batches of --batch-size and prints one JSON
// line per prompt ({"prompt", "completion", "new_tokens", "stop"}) as its batch finishes.
// A sequence stops at the tokenizer's eos (not printed) or after --max-new-tokens.
// Sampling, on the model's device (nn/ops/pick_tokens.h): temperature 0 is greedy (lowest id
// on ties); else softmax(z / T) over the top-k logits (0: all), cut to the smallest set whose
// probability reaches top-p, drawn from a counter-based stream per (seed, prompt index, step),
// so the text does not depend on the batch size. Tokens are bytes until printed: a piece of
// invalid UTF-8 (a byte-level model can emit any byte) prints as U+FFFD, and a character split
// over tokens prints once it is whole.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "data/bpe.h"
#include "data/unicode.h"
#include "eval/model_adapter.h"
#include "nn/decode.h"
#include "nn/model.h"
#include "nn/ops/pick_tokens.h"
#include "nn/weights.h"
#include "tensor/json.h"
#include "tensor/random.h"

namespace {

using namespace hla;

struct GenerateSettings {
  std::string checkpoint, prompt, prompts_file, device = "cpu";
  bool prompt_given = false, prompts_given = false;
  int max_new_tokens = 256;
  double temperature = 0.0;
  int top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  int batch_size = 1;
  bool no_cuda_graph = false;
};

// Bytes in, printable UTF-8 out: valid characters pass, every byte of an invalid sequence
// becomes U+FFFD, and an incomplete character at the end waits for the next piece.
class Utf8Printer {
 public:
  std::string push(const std::string& bytes) {
    pending_ += bytes;
    const size_t whole = pending_.size() - incomplete_tail(pending_);
    std::string out = data::valid_utf8(pending_.substr(0, whole));
    pending_.erase(0, whole);
    return out;
  }
  std::string finish() {  // what is left can no longer complete
    std::string out = data::valid_utf8(pending_);
    pending_.clear();
    return out;
  }

 private:
  // Bytes at the end of s that start a character still missing continuation bytes.
  static size_t incomplete_tail(const std::string& s) {
    for (size_t back = 1; back <= std::min<size_t>(3, s.size()); back++) {
      const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
      if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      return need > back ? back : 0;
    }
    return 0;
  }
  std::string pending_;
};

// The next token of every sequence from logits (B, V_model) on the model's device, among ids
// [0, V): greedy (temperature 0) or sampled, on the device (nn/ops/pick_tokens.h), so only B
// ids reach the host; a top-k the GPU does not take (0, or above kMaxDeviceTopK) samples from
// the logits copied to the CPU. `first`: the index of row 0 in the whole run (its sampling
// stream).
std::vector<int32_t> pick_tokens(const Tensor& logits, int64_t V, size_t first, int step, const GenerateSettings& s) {
  const int64_t B = logits.size(0);
  const Tensor widths = Tensor::from_i32(std::vector<int32_t>(B, static_cast<int32_t>(V)), {B});
  Tensor ids;  // (B) I32
  if (s.temperature == 0) {
    ids = argmax_rows(logits, widths.to(logits.device()));
  } else {
    std::vector<double> u(B);
    for (int64_t b = 0; b < B; b++)
      u[b] = counter_uniform(splitmix64(s.seed) ^ (first + b), static_cast<uint64_t>(step));
    const bool on_device = !logits.is_cuda() || (s.top_k >= 1 && s.top_k <= kMaxDeviceTopK);
    const Device device = on_device ? logits.device() : Device::CPU;
    ids = sample_tokens(logits.to(device), widths.to(device), Tensor::from_f64(u, {B}, DType::F64).to(device),
                        {s.temperature, s.top_k, s.top_p});
  }
  const Tensor host = ids.to(Device::CPU);
  return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + B);
}

std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream in(path);
  HLA_CHECK_INPUT(in, "--prompts ", path, ": cannot open the file");
  std::vector<std::string> prompts;
  std::string line;
  for (int n = 1; std::getline(in, line); n++) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    nlohmann::json j = parse_json(line, where);
    HLA_CHECK_INPUT(j.is_object() && j.contains("prompt") && j["prompt"].is_string(), where,
                    ": expected an object with a \"prompt\" string, got ", json_excerpt(j));
    prompts.push_back(j["prompt"].get<std::string>());
  }
  HLA_CHECK_INPUT(!prompts.empty(), "--prompts ", path, ": no prompts in the file");
  return prompts;
}

void check_settings(const GenerateSettings& s) {
  HLA_CHECK_INPUT(!s.checkpoint.empty(), "--checkpoint DIR is required");
  HLA_CHECK_INPUT(s.prompt_given != s.prompts_given, "give exactly one of --prompt TEXT and --prompts FILE");
  HLA_CHECK_INPUT(s.device == "cpu" || s.device == "cuda", "--device must be cpu or cuda, got '", s.device, "'");
  HLA_CHECK_INPUT(s.device == "cpu" || cuda_available(), "--device cuda: no CUDA GPU here, or hla was built without CUDA");
  HLA_CHECK_INPUT(s.max_new_tokens >= 1, "--max-new-tokens must be >= 1, got ", s.max_new_tokens);
  HLA_CHECK_INPUT(std::isfinite(s.temperature) && s.temperature >= 0, "--temperature must be >= 0 (0: greedy), got ",
                  s.temperature);
  HLA_CHECK_INPUT(s.top_k >= 0, "--top-k must be >= 0 (0: all tokens), got ", s.top_k);
  HLA_CHECK_INPUT(s.top_p > 0 && s.top_p <= 1, "--top-p must be in (0, 1], got ", s.top_p);
  HLA_CHECK_INPUT(s.batch_size >= 1, "--batch-size must be >= 1, got ", s.batch_size);
}

struct Completion {
  std::string bytes;  // the generated text, as the tokenizer decodes it (any bytes)
  int new_tokens = 0;
  bool eos = false;
};

// Decodes one batch; `first` is the index of prompts[0] in the whole run (its sampling stream).
// on_piece(b, bytes) sees every generated piece as it comes.
// V: the ids sampled, those both the model and the tokenizer have (a model's vocabulary may be
// padded past the tokenizer's).
template <class OnPiece>
std::vector<Completion> generate_batch(TrainableModel& model, const data::Tokenizer& tok, int64_t V,
                                       const std::vector<std::vector<int32_t>>& prompts, size_t first,
                                       const GenerateSettings& s, OnPiece&& on_piece) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  std::unique_ptr<Decoder> decoder =
      make_decoder(model, static_cast<int64_t>(longest) + s.max_new_tokens, !s.no_cuda_graph);
  const size_t B = prompts.size();
  std::vector<Completion> out(B);
  std::vector<int32_t> next(B, tok.eos_id());
  Tensor logits = decoder->prefill(prompts);
  for (int step = 0; step < s.max_new_tokens; step++) {
    if (step > 0) logits = decoder->step(next);
    const std::vector<int32_t> picked = pick_tokens(logits, V, first, step, s);
    bool running = false;
    for (size_t b = 0; b < B; b++) {
      if (out[b].eos) continue;
      next[b] = picked[b];
      if (next[b] == tok.eos_id()) {
        out[b].eos = true;
        continue;
      }
      std::string piece = tok.decode({next[b]});
      out[b].bytes += piece;
      out[b].new_tokens++;
      on_piece(b, piece);
      running = true;
    }
    if (!running) break;
  }
  return out;
}

void run_generate(const GenerateSettings& s) {
  check_settings(s);
  const std::string config_path = s.checkpoint + "/" + kModelConfigFile;
  HLA_CHECK_INPUT(std::filesystem::exists(config_path), "--checkpoint ", s.checkpoint,
                  ": not a checkpoint directory (no ", kModelConfigFile, ")");
  const Device device = s.device == "cuda" ? Device::CUDA : Device::CPU;
  ModelConfig config = ModelConfig::load(config_path);
  std::unique_ptr<TrainableModel> model = make_model(config, 0, device, DType::F32);
  load_model_weights(s.checkpoint, model->parameters());
  std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer(eval::checkpoint_tokenizer(s.checkpoint));
  const int64_t V = std::min<int64_t>(tok->vocab_size(), config.vocab_size);

  const std::vector<std::string> texts = s.prompt_given ? std::vector<std::string>{s.prompt}
                                                                 : read_prompts(s.prompts_file);
  const auto start = std::chrono::steady_clock::now();
  int64_t generated = 0;
  for (size_t first = 0; first < texts.size(); first += s.batch_size) {
    const size_t end = std::min(texts.size(), first + s.batch_size);
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = first; i < end; i++) {
      prompts.push_back(tok->encode(texts[i]));
      HLA_CHECK_INPUT(!prompts.back().empty(), "prompt ", i, " is empty: the model needs at least one token to start from");
    }
    if (s.prompt_given) {  // one prompt: stream it
      Utf8Printer printer;
      std::vector<Completion> done = generate_batch(*model, *tok, V, prompts, first, s, [&](size_t, const std::string& piece) {
        std::cout << printer.push(piece) << std::flush;
      });
      std::cout << printer.finish() << "\n";
      generated += done[0].new_tokens;
      continue;
    }
    std::vector<Completion> done = generate_batch(*model, *tok, V, prompts, first, s, [](size_t, const std::string&) {});
    for (size_t b = 0; b < done.size(); b++) {
      Utf8Printer printer;
      std::string completion = printer.push(done[b].bytes) + printer.finish();
      nlohmann::json line = {{"prompt", texts[first + b]}, {"completion", completion},
                             {"new_tokens", done[b].new_tokens}, {"stop", done[b].eos ? "eos" : "length"}};
      std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n" << std::flush;
      generated += done[b].new_tokens;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "generated " << generated << " tokens for " << texts.size() << " prompt(s) in " << seconds << " s ("
            << (seconds > 0 ? generated / seconds : 0.0) << " tokens/s, " << s.device << ")\n";
}

void setup(CLI::App& cmd) {
  auto s = std::make_shared<GenerateSettings>();
  cmd.option_defaults()->always_capture_default();
  cmd.add_option("--checkpoint", s->checkpoint, "checkpoint directory written by hla train");
  CLI::Option* prompt = cmd.add_option("--prompt", s->prompt, "one prompt; its completion streams to stdout");
  CLI::Option* prompts = cmd.add_option("--prompts", s->prompts_file,
                                        "JSONL file of {\"prompt\": TEXT}; one JSON line out per prompt");
  cmd.add_option("--max-new-tokens", s->max_new_tokens, "tokens to generate per prompt (fewer at eos)");
  cmd.add_option("--temperature", s->temperature, "sampling temperature; 0 = greedy");
  cmd.add_option("--top-k", s->top_k, "sample among the k most likely tokens (0: all)");
  cmd.add_option("--top-p", s->top_p, "nucleus: the smallest set of tokens with this much probability");
  cmd.add_option("--seed", s->seed, "sampling seed");
  cmd.add_option("--device", s->device, "cpu or cuda");
  cmd.add_option("--batch-size", s->batch_size, "prompts decoded together (--prompts)");
  cmd.add_flag("--no-cuda-graph", s->no_cuda_graph, "launch every kernel of each step instead of replaying a CUDA graph");
  cmd.callback([s, prompt, prompts] {
    s->prompt_given = prompt->count() > 0;
    s->prompts_given = prompts->count() > 0;
    run_generate(*s);
  });
}

const bool registered = hla::cli::register_command(
    "generate", "Generate text from a checkpoint with the decoding state (prefill, then one step per token)", setup);

}  // namespace
