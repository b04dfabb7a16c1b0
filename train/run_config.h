// RunConfig: every setting of `hla train`, in four sections ([model], [data], [optim], [train]),
// each listed once in visit_settings() (the [model] fields by ModelConfig's own field list,
// nn/config.h). That one list drives the command-line flags (--section.key value), the TOML run
// file ([section] key = value), the start-up table and the copy of the settings kept in
// trainer_state.json, so they can never disagree.
//
// The run file is read strictly (parse_run_file): a TOML subset of [section] headers and
// `key = value` lines whose values keep their TOML type (string, integer, float, boolean, a
// one-line list of those), so `steps = "5"`, `steps = 2.5` and `nesterov = 1` are errors naming
// the file, the key and the value instead of being converted.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "nn/config.h"
#include "train/optim.h"
#include "train/schedule.h"

namespace hla {

struct ModelSettings {
  std::string config;           // optional fla config.json; [model] keys given explicitly override it
  std::string hybrid = "pure";  // pure | r:1 | transformer (ignored when attn_layers is given)
  ModelConfig fields;           // ModelConfig's defaults, except vocab_size 0 = the data's
  ModelSettings() { fields.vocab_size = 0; }
};

struct DataSettings {
  std::string source = "mqar";  // mqar | .txt/.jsonl[.zst] files or globs | shard dir / glob
  std::string tokenizer = "byte";
  int64_t batch_size = 16;  // sequences per micro-batch
  int64_t seq_len = 128;
  uint64_t seed = 0;         // training data order (MQAR: the train stream)
  uint64_t val_seed = 1;     // MQAR validation stream
  double val_fraction = 0.1; // text files: the last part of the token stream held out
  std::string jsonl_field = "text";
  std::string documents = "windows";  // windows | reset (each document from a zero state)
  int64_t mqar_vocab = 8192;
  int64_t mqar_kv_pairs = 16;
  double mqar_power_a = 0.01;
  bool mqar_random_non_queries = true;
  int64_t mqar_train_examples = 0;  // 0: an endless stream; else cycle over this many
};

struct OptimSettings {
  OptimConfig optim;
  ScheduleConfig schedule;  // total_steps comes from [train] steps
  double clip = 1.0;        // global grad-norm clip; 0 = off
};

struct TrainSettings {
  int64_t steps = 1000;
  int64_t grad_accum = 1;  // micro-batches per update
  uint64_t seed = 42;      // model initialisation
  std::string device = "cpu";
  std::string dtype = "f32";  // compute dtype: f32 | bf16 (CUDA)
  std::string out_dir = "runs/train";
  int64_t log_every = 1;
  int64_t val_every = 100;  // 0: only at the end
  int64_t val_batches = 8;
  int64_t save_every = 0;   // 0: only at the end
  int64_t gpus = 1;         // data parallel: one process per GPU (NCCL, dist/launch.h)
  int64_t zero = 0;         // 1: ZeRO-1, optimizer state sharded over the ranks
  double bucket_mb = 25;    // data parallel: gradient all-reduce bucket size
  bool cuda_graph = true;   // cuda, one process: capture the training step in a CUDA graph, replay it
  std::string recompute = "none";  // none | mixer | mlp | layer, or per kind "linear=mixer,attention=none" (nn/model.h)
  bool delta_rule_keep = true;     // GPU chunked recurrences: the forward keeps chunk states for the backward (README)
};

struct RunConfig {
  ModelSettings model;
  DataSettings data;
  OptimSettings optim;
  TrainSettings train;
  // "section.key" of every setting given explicitly (command line or run file).
  std::set<std::string> explicitly_set;
  // The run file the settings came from ("" when only flags were given), for error messages.
  std::string run_file;

  // Sets every setting the run file gives, except those already in explicitly_set (the command
  // line's flags win); `file` is parse_run_file's result. An unknown key, a value of another
  // type or outside the setting's C++ type is an error naming `source`, the key and the value.
  void apply_run_file(const nlohmann::json& file, const std::string& source);
  // The model config: [model] config (if any) overlaid field by field with the explicitly
  // given [model] keys, else the [model] section alone; vocab_size 0 becomes data_vocab.
  ModelConfig model_config(int data_vocab) const;
  ScheduleConfig schedule() const;  // with total_steps = train.steps
  void validate() const;            // errors name the setting: "[train] steps must be >= 1, got 0"
  nlohmann::json to_json() const;   // {"model": {...}, "data": {...}, ...}
  std::string table() const;        // one "section.key  value" line per setting
};

// A run file's text as JSON {"section": {"key": value}} (keys before any section at the top).
// Errors name `source` and the line: "run.toml:3: ...". Not accepted: quoted or dotted keys,
// multi-line strings and lists, nested lists, inline tables, dates, inf and nan, a key or a
// section given twice.
nlohmann::json parse_run_file(const std::string& text, const std::string& source);
nlohmann::json read_run_file(const std::string& path);  // parse_run_file of the file's text
// One value in run-file syntax ("5", "2.5", "true", "[1, 3]", "\"text\""); errors start with
// "<source>: <key>".
nlohmann::json parse_run_value(const std::string& text, const std::string& source, const std::string& key);

// A --section.key flag's text as the setting's value: a string or a name (routing) takes the
// text as given, any other setting reads it as a run-file value, with the same types and errors as the file
// (--train.steps 2.5 and --data.seed -1 are errors naming the flag and the value).
template <class T>
void read_flag(const std::string& text, T& value, const std::string& flag) {
  if constexpr (std::is_same_v<T, std::string> || std::is_enum_v<T>) read_setting(nlohmann::json(text), value, "command line", flag);
  else read_setting(parse_run_value(text, "command line", flag), value, "command line", flag);
}

// Calls f(section, key, field&, help) for every setting, in table order.
template <class RC, class F>
void visit_settings(RC& c, F&& f) {
  f("model", "config", c.model.config, "fla config.json to start from (explicit [model] keys override it)");
  f("model", "hybrid", c.model.hybrid, "pure | r:1 (one attention layer closing each group of r) | transformer");
  ModelConfig::visit_fields([&](const ModelField& field, auto& value) { f("model", field.key(), value, field.help); },
                            c.model.fields);
  auto& d = c.data;
  f("data", "source", d.source, "mqar | .txt/.jsonl[.zst] files | shard directory or glob");
  f("data", "tokenizer", d.tokenizer, "byte | path to tokenizer.json (text sources)");
  f("data", "batch_size", d.batch_size, "sequences per micro-batch");
  f("data", "seq_len", d.seq_len, "tokens per sequence");
  f("data", "seed", d.seed, "training data seed");
  f("data", "val_seed", d.val_seed, "MQAR validation seed");
  f("data", "val_fraction", d.val_fraction, "text files: held-out fraction of the tokens");
  f("data", "jsonl_field", d.jsonl_field, ".jsonl: the text field");
  f("data", "documents", d.documents,
    "windows (documents run into each other) | reset (each document from a zero state, as fla's varlen)");
  f("data", "mqar_vocab", d.mqar_vocab, "MQAR vocabulary V");
  f("data", "mqar_kv_pairs", d.mqar_kv_pairs, "MQAR key-value pairs N (4N <= seq_len)");
  f("data", "mqar_power_a", d.mqar_power_a, "MQAR gap power law a");
  f("data", "mqar_random_non_queries", d.mqar_random_non_queries, "MQAR random filler tokens");
  f("data", "mqar_train_examples", d.mqar_train_examples, "MQAR training set size (0 = endless)");
  auto& o = c.optim;
  f("optim", "name", o.optim.name, "adamw | muon");
  f("optim", "lr", o.optim.lr, "peak lr (Muon: of the hidden matrices)");
  f("optim", "adam_lr", o.optim.adam_lr, "Muon: peak lr of embeddings, head, 1-D (0 = lr)");
  f("optim", "beta1", o.optim.beta1, "AdamW beta1");
  f("optim", "beta2", o.optim.beta2, "AdamW beta2");
  f("optim", "eps", o.optim.eps, "AdamW epsilon");
  f("optim", "weight_decay", o.optim.weight_decay, "decoupled weight decay");
  f("optim", "adam_weight_decay", o.optim.adam_weight_decay, "Muon: decay on its AdamW side");
  f("optim", "momentum", o.optim.momentum, "Muon momentum");
  f("optim", "nesterov", o.optim.nesterov, "Muon Nesterov momentum");
  f("optim", "ns_steps", o.optim.ns_steps, "Muon Newton-Schulz steps");
  f("optim", "muon_scale", o.optim.muon_scale, "Muon update scale: rms | shape");
  f("optim", "schedule", o.schedule.kind, "cosine | wsd | constant");
  f("optim", "warmup_steps", o.schedule.warmup_steps, "linear warmup updates");
  f("optim", "min_lr_ratio", o.schedule.min_lr_ratio, "final lr / peak lr");
  f("optim", "decay_fraction", o.schedule.decay_fraction, "wsd: fraction of steps in the decay");
  f("optim", "decay_shape", o.schedule.decay_shape, "wsd: linear | minus_sqrt");
  f("optim", "clip", o.clip, "global grad-norm clip (0 = off)");
  auto& t = c.train;
  f("train", "steps", t.steps, "optimizer updates");
  f("train", "grad_accum", t.grad_accum, "micro-batches per update");
  f("train", "seed", t.seed, "model initialisation seed");
  f("train", "device", t.device, "cpu | cuda");
  f("train", "dtype", t.dtype, "compute dtype: f32 | bf16 (cuda)");
  f("train", "out_dir", t.out_dir, "metrics.jsonl and checkpoint/ go here");
  f("train", "log_every", t.log_every, "console line every N steps");
  f("train", "val_every", t.val_every, "validation every N steps (0 = at the end only)");
  f("train", "val_batches", t.val_batches, "batches per validation");
  f("train", "save_every", t.save_every, "checkpoint every N steps (0 = at the end only)");
  f("train", "gpus", t.gpus, "data parallel over N GPUs, one process each (NCCL); the global batch stays the same");
  f("train", "zero", t.zero, "1: ZeRO-1, optimizer state sharded over the ranks (0 = off)");
  f("train", "bucket_mb", t.bucket_mb, "data parallel: gradient all-reduce bucket size in MB");
  f("train", "cuda_graph", t.cuda_graph, "cuda, one process: replay the training step as a CUDA graph (false = launch every kernel)");
  f("train", "recompute", t.recompute,
    "none | mixer | mlp | layer: the part of every block the backward recomputes instead of keeping its activations; "
    "or per layer kind, e.g. linear=mixer,attention=none");
  f("train", "delta_rule_keep", t.delta_rule_keep, "GPU chunked delta rule, decay attention (RetNet, Mamba-2, GLA, HGRN-2) and RWKV-6: the forward keeps its chunk-start states (and the delta rule's workspaces) for the backward (false = the backward replays them, less memory)");
}

}  // namespace hla
