// `hla forward`: one forward (and optionally backward) pass of a checkpoint on given tokens,
// written to a safetensors file, so hla can be compared with another implementation (fla) on
// the same weights: scripts/fla_compare.sh does it for scripts/fla_export.py's models.
//
//   hla forward --checkpoint DIR --tokens FILE.safetensors [--grads] [--device cpu|cuda] --out FILE
//
// FILE.safetensors holds input_ids (B, T) I32. The output holds logits (B, T, V) F32, loss ()
// F32 (the mean next-token cross-entropy: position t predicts token t+1, B*(T-1) terms, as fla
// and Hugging Face compute it) and, with --grads, grad.<param> F32 for every parameter under its
// fla name (the gradient of that loss).
#include <iostream>

#include "cli/command.h"
#include "nn/model.h"
#include "nn/ops/cross_entropy.h"
#include "nn/weights.h"
#include "tensor/safetensors.h"

namespace {

using namespace hla;

struct ForwardSettings {
  std::string checkpoint, tokens, out, device = "cpu";
  bool grads = false;
};

// input_ids (B, T) I32 from `path`, every id in [0, vocab); T >= 2 so the loss has a term.
Tensor read_input_ids(const std::string& path, int vocab) {
  SafetensorsFile file = load_safetensors(path);
  const Tensor& ids = file.get("input_ids");
  HLA_CHECK_INPUT(ids.dtype() == DType::I32 && ids.dim() == 2, path, ": input_ids must be (B, T) I32, got ",
                  dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  HLA_CHECK_INPUT(ids.size(1) >= 2, path, ": input_ids has T = ", ids.size(1),
                  "; the next-token loss needs at least 2 positions");
  const int32_t* v = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); i++)
    HLA_CHECK_INPUT(v[i] >= 0 && v[i] < vocab, path, ": input_ids[", i / ids.size(1), ", ", i % ids.size(1), "] is ",
                    v[i], ", outside the vocabulary [0, ", vocab, ") of the checkpoint's config.json");
  return ids;
}

// targets[b, t] = ids[b, t + 1]; the last position has none (kIgnoreIndex).
Tensor next_token_targets(const Tensor& ids) {
  const int64_t B = ids.size(0), T = ids.size(1);
  std::vector<int32_t> targets(B * T, kIgnoreIndex);
  const int32_t* v = ids.data<int32_t>();
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t + 1 < T; t++) targets[b * T + t] = v[b * T + t + 1];
  return Tensor::from_i32(targets, {B, T});
}

void run_forward(const ForwardSettings& s) {
  const Device device = s.device == "cuda" ? Device::CUDA : Device::CPU;
  const ModelConfig config = ModelConfig::load(s.checkpoint + "/" + kModelConfigFile);
  std::unique_ptr<TrainableModel> model = make_model(config, 0, device, DType::F32);
  ParameterList params = model->parameters();
  load_model_weights(s.checkpoint, params);
  const Tensor ids = read_input_ids(s.tokens, config.vocab_size);
  Var logits = model->logits(ids.to(device));                                  // (B, T, V)
  Var loss = cross_entropy(logits, next_token_targets(ids).to(device));         // ()
  NamedTensors out = {{"logits", logits.value().to(Device::CPU)}, {"loss", loss.value().to(Device::CPU)}};
  if (s.grads) {
    loss.backward();
    for (const NamedParameter& p : params) {
      const Tensor& g = p.var.grad();
      out.emplace_back("grad." + p.name, g.defined() ? g.to(Device::CPU).to(DType::F32)
                                                     : Tensor::zeros(p.var.value().shape(), DType::F32));
    }
  }
  save_safetensors(s.out, out, {{"format", "pt"}});
  std::cout << "forward: " << config.model_type << " " << config.pattern() << ", input_ids " << shape_str(ids.shape())
            << ", loss " << loss.value().to(Device::CPU).item() << (s.grads ? ", grads of " : "")
            << (s.grads ? std::to_string(params.size()) + " parameters" : "") << " -> " << s.out << "\n";
}

const bool registered = hla::cli::register_command(
    "forward", "Logits, next-token loss and (--grads) parameter gradients of a checkpoint on given tokens",
    [](CLI::App& cmd) {
      auto s = std::make_shared<ForwardSettings>();
      cmd.add_option("--checkpoint", s->checkpoint, "model directory: config.json and model.safetensors (fla's or hla's)")
          ->required();
      cmd.add_option("--tokens", s->tokens, "safetensors file with input_ids (B, T) I32")->required();
      cmd.add_option("--out", s->out, "safetensors file to write: logits, loss, grad.<param>")->required();
      cmd.add_flag("--grads", s->grads, "also write the gradient of the loss for every parameter");
      cmd.add_option("--device", s->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
      cmd.callback([s] { run_forward(*s); });
    });

}  // namespace
