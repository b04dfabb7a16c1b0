// The decode bench (see decode_bench.h).
#include "eval/decode_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "autograd/var.h"
#include "eval/svg_plot.h"
#include "nn/layers/mixers.h"
#include "nn/model.h"
#include "tensor/error.h"
#include "tensor/random.h"

namespace hla::eval {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// A Decoder of `capacity` tokens after prefilling `batch` random prompts of `prompt` tokens.
std::unique_ptr<Decoder> prefilled_decoder(TrainableModel& model, const ModelConfig& config, int64_t batch,
                                           int64_t prompt, int64_t capacity, bool cuda_graph, Rng& rng) {
  std::unique_ptr<Decoder> decoder = make_decoder(model, capacity, cuda_graph);
  std::vector<std::vector<int32_t>> prompts(batch, std::vector<int32_t>(prompt));
  for (auto& p : prompts)
    for (int32_t& t : p) t = static_cast<int32_t>(rng.below(config.vocab_size));
  decoder->prefill(prompts);
  return decoder;
}

double decode_tokens_per_second(TrainableModel& model, const ModelConfig& config, int64_t batch,
                                const DecodeBenchOptions& o, Rng& rng) {
  std::unique_ptr<Decoder> decoder =
      prefilled_decoder(model, config, batch, o.speed_context, o.speed_context + o.warmup + 1 + o.steps, o.cuda_graph, rng);
  std::vector<int32_t> tokens(batch);
  auto step = [&] {
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng.below(config.vocab_size));
    return decoder->step(tokens);
  };
  for (int i = 0; i < o.warmup; i++) step();
  step().to(Device::CPU);  // every warm-up step done
  const auto start = std::chrono::steady_clock::now();
  Tensor logits;
  for (int i = 0; i < o.steps; i++) logits = step();
  logits.to(Device::CPU);  // waits for the last step, and so for all of them
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(batch) * o.steps / seconds;
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / kMiB);
  return buf;
}

// "4.00x", or "-" when this row holds none of it.
std::string times(int64_t reference, int64_t bytes) {
  if (bytes == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", static_cast<double>(reference) / static_cast<double>(bytes));
  return buf;
}

const DecodeBenchRow* transformer_row(const DecodeBench& bench) {
  for (const DecodeBenchRow& r : bench.rows)
    if (r.hybrid == "transformer") return &r;
  return nullptr;
}

}  // namespace

std::vector<std::pair<std::string, ModelConfig>> decode_bench_configs(const DecodeBenchOptions& o, std::string* source) {
  ModelConfig base, transformer;
  const bool from_shape = o.config.empty();
  if (from_shape) {
    const std::string base_file = o.configs_dir + "/" + o.mixer + "-" + o.shape + ".json";
    const std::string transformer_file = o.configs_dir + "/transformer-" + o.shape + ".json";
    base = ModelConfig::load(base_file);
    transformer = ModelConfig::load(transformer_file);
    // the hybrids' attention layers are the Transformer's
    base.attn.num_heads = transformer.attn_heads();
    base.attn.num_kv_heads = transformer.attn_kv_heads();
    if (source) *source = base_file + " + " + transformer_file;
  } else {
    base = ModelConfig::load(o.config);
    if (source) *source = o.config;
  }
  HLA_CHECK_INPUT(base.mixer().family != MixerFamily::Attention, "hla bench decode: the base config (",
                  from_shape ? o.mixer + "-" + o.shape : o.config, ") must have a linear mixer, got model_type ",
                  base.model_type);
  std::vector<std::pair<std::string, ModelConfig>> configs;
  for (const std::string& hybrid : o.hybrids) {
    ModelConfig c = hybrid == "transformer" && from_shape ? transformer : base;
    c.set_hybrid(hybrid);
    c.validate(hybrid + " of " + (source ? *source : o.config));
    configs.emplace_back(hybrid, c);
  }
  return configs;
}

DecodeBench run_decode_bench(const DecodeBenchOptions& o, std::ostream* log) {
  HLA_CHECK_INPUT(o.steps >= 1 && o.warmup >= 0 && o.speed_context >= 1,
                  "hla bench decode: --steps >= 1, --warmup >= 0 and --speed-context >= 1 are needed");
  DecodeBench bench;
  bench.options = o;
  Rng rng(1234);
  for (const auto& [hybrid, config] : decode_bench_configs(o, &bench.source)) {
    DecodeBenchRow row;
    row.hybrid = hybrid;
    row.config = config;
    NoGradGuard no_grad;
    std::unique_ptr<TrainableModel> model = make_model(config, 1, o.device, o.dtype);
    row.parameters = count_parameters(model->parameters());
    for (int64_t context : o.contexts) {
      row.memory.push_back(decode_memory(config, context, o.dtype));
      if (o.measure_memory)
        row.measured.push_back(prefilled_decoder(*model, config, 1, 1, context, o.cuda_graph, rng)->memory());
    }
    for (int64_t batch : o.batches) row.tokens_per_second.push_back(decode_tokens_per_second(*model, config, batch, o, rng));
    if (log) {
      *log << "decode bench: " << hybrid << " (" << config.pattern() << ") done:";
      for (size_t i = 0; i < o.batches.size(); i++)
        *log << " B=" << o.batches[i] << " " << static_cast<int64_t>(row.tokens_per_second[i]) << " tok/s";
      *log << "\n";
    }
    bench.rows.push_back(std::move(row));
  }
  return bench;
}

std::string decode_bench_table(const DecodeBench& bench) {
  const DecodeBenchOptions& o = bench.options;
  const DecodeBenchRow* reference = transformer_row(bench);
  std::ostringstream out;
  char line[256];
  out << "decode bench: " << o.mixer << " from " << bench.source << ", " << dtype_name(o.dtype) << " on "
      << (o.device == Device::CUDA ? "cuda" : "cpu") << ", random-init weights\n\n"
      << "memory per sequence (MiB = 2^20 bytes); xKV, xtotal = the Transformer's bytes over this row's\n";
  std::snprintf(line, sizeof line, "%-12s %-8s %10s %12s %12s %12s %8s %8s\n", "config", "context", "state MiB",
                "KV MiB", "total MiB", "measured MiB", "xKV", "xtotal");
  out << line;
  for (const DecodeBenchRow& r : bench.rows) {
    for (size_t i = 0; i < o.contexts.size(); i++) {
      const DecodeMemory& m = r.memory[i];
      const std::string measured = r.measured.empty() ? "-" : mib(r.measured[i].total());
      const std::string kv_x = reference ? times(reference->memory[i].kv_bytes, m.kv_bytes) : "-";
      const std::string total_x = reference ? times(reference->memory[i].total(), m.total()) : "-";
      std::snprintf(line, sizeof line, "%-12s %-8lld %10s %12s %12s %12s %8s %8s\n", r.hybrid.c_str(),
                    static_cast<long long>(o.contexts[i]), mib(m.state_bytes).c_str(), mib(m.kv_bytes).c_str(),
                    mib(m.total()).c_str(), measured.c_str(), kv_x.c_str(), total_x.c_str());
      out << line;
    }
  }
  out << "\ndecode speed after a " << o.speed_context << "-token prompt (tokens/s over " << o.steps
      << " batched steps after " << o.warmup << " warm-up steps)\n";
  std::snprintf(line, sizeof line, "%-12s %-28s %12s", "config", "pattern", "parameters");
  out << line;
  for (int64_t b : o.batches) {
    std::snprintf(line, sizeof line, " %12s", ("B=" + std::to_string(b)).c_str());
    out << line;
  }
  out << "\n";
  for (const DecodeBenchRow& r : bench.rows) {
    const std::string pattern = r.config.pattern().substr(0, 28);
    std::snprintf(line, sizeof line, "%-12s %-28s %12lld", r.hybrid.c_str(), pattern.c_str(),
                  static_cast<long long>(r.parameters));
    out << line;
    for (double t : r.tokens_per_second) {
      std::snprintf(line, sizeof line, " %12.1f", t);
      out << line;
    }
    out << "\n";
  }
  return out.str();
}

nlohmann::json decode_bench_json(const DecodeBench& bench) {
  const DecodeBenchOptions& o = bench.options;
  auto bytes = [](const DecodeMemory& m) {
    return nlohmann::json{{"state_bytes", m.state_bytes}, {"kv_bytes", m.kv_bytes}, {"total_bytes", m.total()}};
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const DecodeBenchRow& r : bench.rows) {
    nlohmann::json memory = nlohmann::json::array(), speed = nlohmann::json::object();
    for (size_t i = 0; i < o.contexts.size(); i++) {
      nlohmann::json m = {{"context", o.contexts[i]}, {"decode_memory", bytes(r.memory[i])}};
      if (!r.measured.empty()) m["measured"] = bytes(r.measured[i]);
      memory.push_back(m);
    }
    for (size_t i = 0; i < o.batches.size(); i++) speed[std::to_string(o.batches[i])] = r.tokens_per_second[i];
    rows.push_back({{"hybrid", r.hybrid},
                    {"pattern", r.config.pattern()},
                    {"attention_layers", r.config.attn.layers.size()},
                    {"parameters", r.parameters},
                    {"memory_per_sequence", memory},
                    {"tokens_per_second", speed}});
  }
  return {{"mixer", o.mixer},
          {"shape", o.config.empty() ? o.shape : o.config},
          {"source", bench.source},
          {"device", o.device == Device::CUDA ? "cuda" : "cpu"},
          {"dtype", dtype_name(o.dtype)},
          {"weights", "random init"},
          {"contexts", o.contexts},
          {"batches", o.batches},
          {"speed_context", o.speed_context},
          {"warmup", o.warmup},
          {"steps", o.steps},
          {"rows", rows}};
}

std::string decode_bench_svg(const DecodeBench& bench) {
  std::vector<PlotSeries> series;
  double largest = 0;
  for (const DecodeBenchRow& r : bench.rows) {
    PlotSeries s{r.hybrid, {}, {}};
    for (size_t i = 0; i < bench.options.contexts.size(); i++) {
      s.x.push_back(static_cast<double>(bench.options.contexts[i]));
      s.y.push_back(static_cast<double>(r.memory[i].total()) / kMiB);
      largest = std::max(largest, s.y.back());
    }
    series.push_back(s);
  }
  const std::string title = "Decoding memory per sequence: " + bench.options.mixer + " hybrids, " +
                            dtype_name(bench.options.dtype) + " KV cache";
  return line_plot_svg(series, {title, "context (tokens)", "state + KV memory per sequence (MiB)", true, 0, largest});
}

}  // namespace hla::eval
