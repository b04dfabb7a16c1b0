// The sweep file reader and the grid expansion (see grid.h).
#include "sweep/grid.h"

#include <fnmatch.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "tensor/error.h"
#include "train/run_config.h"

namespace hla::sweep {

namespace {

using nlohmann::json;

// A [grid] key: the run-file setting it sets ("" for lr_<optimizer>, set per optimiser).
struct GridAxis {
  const char* key;
  const char* section;
  const char* setting;
};
const GridAxis kAxes[] = {{"model_type", "model", "model_type"}, {"hybrid", "model", "hybrid"},
                          {"routing", "model", "routing"},       {"optimizer", "optim", "name"},
                          {"lr", "optim", "lr"},                 {"lr_adamw", "optim", "lr"},
                          {"lr_muon", "optim", "lr"},            {"seed", "train", "seed"}};
const char* const kGridKeys = "model_type, hybrid, routing, optimizer, lr, lr_adamw, lr_muon, seed";

// An [eval] key and the type its value must have; the `hla eval` flag is --key with '-' for '_'.
enum class EvalType { String, Integer, Count, Number, IntegerList };
struct EvalKey {
  const char* key;
  EvalType type;
};
const EvalKey kEvalKeys[] = {{"tasks", EvalType::String},        {"data_dir", EvalType::String},
                             {"limit", EvalType::Integer},       {"batch_size", EvalType::Integer},
                             {"samples", EvalType::Integer},     {"length", EvalType::IntegerList},
                             {"seed", EvalType::Count},          {"haystack", EvalType::String},
                             {"words", EvalType::String},        {"token_scale", EvalType::Number},
                             {"mqar_grid", EvalType::String},    {"mqar_examples", EvalType::Integer},
                             {"mqar_vocab", EvalType::Integer},  {"ppl_file", EvalType::String},
                             {"ppl_docs", EvalType::Integer},    {"max_length", EvalType::Integer}};

std::string eval_key_list() {
  std::string list;
  for (const EvalKey& k : kEvalKeys) list += (list.empty() ? "" : ", ") + std::string(k.key);
  return list;
}

// The [grid] values of one key as a list (a single value is a list of one), each read as T.
template <class T>
std::vector<json> axis_values(const json& value, const std::string& source, const std::string& key) {
  const json list = value.is_array() ? value : json::array({value});
  HLA_CHECK_INPUT(!list.empty(), source, ": [grid] ", key, " is an empty list (give at least one value)");
  std::vector<json> values;
  for (const json& item : list) {
    T typed{};
    read_setting(item, typed, source, "[grid] " + key);
    const json j = typed;
    HLA_CHECK_INPUT(std::find(values.begin(), values.end(), j) == values.end(), source, ": [grid] ", key,
                    ": the value ", j.dump(), " is given twice");
    values.push_back(j);
  }
  return values;
}

// "pure" | "r:1" | "transformer" | a pattern of L and A (one letter per layer).
bool is_layer_pattern(const std::string& hybrid) {
  return !hybrid.empty() && hybrid.find_first_not_of("LA") == std::string::npos;
}

std::string hybrid_name_part(const std::string& hybrid) {
  if (hybrid == "transformer") return "attn";
  const size_t colon = hybrid.find(':');
  if (colon != std::string::npos) return hybrid.substr(0, colon) + "to" + hybrid.substr(colon + 1);
  return hybrid;
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The checked [eval] section as `hla eval` flags.
std::vector<std::string> eval_flags(const json& section, const std::string& source) {
  std::vector<std::string> args;
  if (section.is_null()) return args;
  HLA_CHECK_INPUT(section.contains("tasks"), source,
                  ": [eval] has settings but no tasks (give tasks = \"mqar\", \"ruler\", ... or drop [eval])");
  for (auto item = section.begin(); item != section.end(); ++item) {
    const EvalKey* known = nullptr;
    for (const EvalKey& k : kEvalKeys)
      if (item.key() == k.key) known = &k;
    HLA_CHECK_INPUT(known, source, ": unknown setting '[eval] ", item.key(), "' (the [eval] keys are the flags of `hla eval`: ",
                    eval_key_list(), ")");
    const std::string field = "[eval] " + item.key();
    std::string text;
    switch (known->type) {
      case EvalType::String: read_setting(*item, text, source, field); break;
      case EvalType::Integer: {
        int64_t v = 0;
        read_setting(*item, v, source, field);
        text = std::to_string(v);
        break;
      }
      case EvalType::Count: {
        uint64_t v = 0;
        read_setting(*item, v, source, field);
        text = std::to_string(v);
        break;
      }
      case EvalType::Number: {
        double v = 0;
        read_setting(*item, v, source, field);
        text = json(v).dump();
        break;
      }
      case EvalType::IntegerList: {
        std::vector<int> v;
        read_setting(*item, v, source, field);
        HLA_CHECK_INPUT(!v.empty(), source, ": ", field, " is an empty list");
        for (size_t i = 0; i < v.size(); i++) text += (i ? "," : "") + std::to_string(v[i]);
        break;
      }
    }
    std::string flag = "--" + item.key();
    std::replace(flag.begin() + 2, flag.end(), '_', '-');
    args.push_back(flag);
    args.push_back(text);
  }
  return args;
}

// The [grid] section, checked: every key known, each a list of the setting's type, and not also
// given in the shared sections.
std::map<std::string, std::vector<json>> read_grid(const json& grid, const json& shared, const std::string& source) {
  std::map<std::string, std::vector<json>> axes;
  if (grid.is_null()) return axes;
  for (auto item = grid.begin(); item != grid.end(); ++item) {
    const GridAxis* axis = nullptr;
    for (const GridAxis& a : kAxes)
      if (item.key() == a.key) axis = &a;
    HLA_CHECK_INPUT(axis, source, ": unknown setting '[grid] ", item.key(), "' (grid keys: ", kGridKeys, ")");
    const json& section = shared.contains(axis->section) ? shared[axis->section] : json::object();
    HLA_CHECK_INPUT(!section.contains(axis->setting), source, ": [grid] ", item.key(), " and [", axis->section, "] ",
                    axis->setting, " are both given (the grid sets it per run; drop one)");
    const std::string key = item.key();
    if (key == "seed") axes[key] = axis_values<uint64_t>(*item, source, key);
    else if (key.rfind("lr", 0) == 0) axes[key] = axis_values<double>(*item, source, key);
    else axes[key] = axis_values<std::string>(*item, source, key);
  }
  if (axes.count("hybrid"))
    HLA_CHECK_INPUT(!shared.contains("model") || !shared["model"].contains("attn_layers"), source,
                    ": [grid] hybrid and [model] attn_layers are both given (drop one)");
  return axes;
}

// The settings the grid gives one run, before the Transformer's collapse.
struct GridPoint {
  json model_type, hybrid, routing, optimizer, lr, seed;  // null: not on the grid
};

// Sets the grid point's values into the run file; the Transformer loses hybrid and routing.
json point_run_file(const json& shared, const GridPoint& p, int num_layers, const std::string& source) {
  json run = shared;
  if (!run.contains("model")) run["model"] = json::object();
  auto set = [&](const char* section, const char* key, const json& v) {
    if (!v.is_null()) run[section][key] = v;
  };
  const bool transformer = p.model_type == "transformer" || p.hybrid == "transformer" ||
                           (p.model_type.is_null() && run["model"].value("model_type", "") == "transformer");
  set("model", "model_type", transformer ? json("transformer") : p.model_type);
  if (transformer) {
    run["model"]["hybrid"] = "transformer";
    run["model"].erase("attn_layers");
    if (!p.routing.is_null()) run["model"]["routing"] = "none";
  } else if (p.hybrid.is_string() && is_layer_pattern(p.hybrid.get<std::string>())) {
    const std::string pattern = p.hybrid.get<std::string>();
    HLA_CHECK_INPUT(static_cast<int>(pattern.size()) == num_layers, source, ": [grid] hybrid \"", pattern, "\" has ",
                    pattern.size(), " layers, the model ", num_layers, " (num_hidden_layers)");
    json layers = json::array();
    for (size_t i = 0; i < pattern.size(); i++)
      if (pattern[i] == 'A') layers.push_back(static_cast<int>(i));
    run["model"]["attn_layers"] = layers;
  } else {
    set("model", "hybrid", p.hybrid);
  }
  if (!transformer) set("model", "routing", p.routing);
  set("optim", "name", p.optimizer);
  set("optim", "lr", p.lr);
  set("train", "seed", p.seed);
  return run;
}

// Validates the run's settings as `hla train` does and fills in its name and axis values.
SweepRun make_run(const json& run_file, const std::string& source) {
  RunConfig config;
  config.apply_run_file(run_file, source);
  ModelConfig model;
  try {
    config.validate();
    model = config.model_config(1);
  } catch (const Error& e) {
    fail(source, ": a run of the grid (", run_file["model"].dump(), "): ", e.what());
  }
  std::string pattern = model.pattern();
  pattern.erase(std::remove(pattern.begin(), pattern.end(), ' '), pattern.end());
  const auto attention = std::count(pattern.begin(), pattern.end(), 'A');
  std::string hybrid = config.model.hybrid;
  if (model.model_type == "transformer") hybrid = "transformer";
  else if (config.explicitly_set.count("model.attn_layers")) hybrid = pattern;
  SweepRun run;
  run.run_file = run_file;
  run.steps = config.train.steps;
  run.axes = {{"mixer", model.model_type},
              {"hybrid", hybrid},
              {"pattern", pattern},
              {"attn_fraction", double(attention) / double(pattern.size())},
              {"routing", routing_name(model.routing)},
              {"optimizer", config.optim.optim.name},
              {"lr", config.optim.optim.lr},
              {"seed", config.train.seed}};
  run.name = model.model_type + "-" + hybrid_name_part(hybrid) + "-" + routing_name(model.routing) + "-" +
             config.optim.optim.name + "-lr" + number_text(config.optim.optim.lr) + "-s" +
             std::to_string(config.train.seed);
  return run;
}

// The axis's values, or one null (not on the grid).
std::vector<json> values_or_null(const std::map<std::string, std::vector<json>>& axes, const std::string& key) {
  auto it = axes.find(key);
  return it == axes.end() ? std::vector<json>{json()} : it->second;
}

}  // namespace

Sweep parse_sweep(const std::string& text, const std::string& source) {
  json file = parse_run_file(text, source);
  Sweep sweep;
  sweep.source = source;
  const json grid = file.contains("grid") ? file["grid"] : json();
  const json eval = file.contains("eval") ? file["eval"] : json();
  file.erase("grid");
  file.erase("eval");
  // pass 1: the shared sections, read as a train run file (unknown keys and types fail here).
  RunConfig shared;
  shared.apply_run_file(file, source);
  HLA_CHECK_INPUT(!shared.explicitly_set.count("train.out_dir"), source,
                  ": [train] out_dir is set by the sweep (each run writes to <--out>/<run name>); drop it");
  sweep.eval_args = eval_flags(eval, source);
  // pass 2: the axes, and the learning rates per optimiser.
  const auto axes = read_grid(grid, file, source);
  std::vector<json> optimizers = values_or_null(axes, "optimizer");
  for (const char* name : {"adamw", "muon"}) {
    const std::string key = std::string("lr_") + name;
    const bool used = std::any_of(optimizers.begin(), optimizers.end(), [&](const json& o) {
      return o.is_null() ? shared.optim.optim.name == name : o == name;
    });
    HLA_CHECK_INPUT(!axes.count(key) || used, source, ": [grid] ", key, " is given but no run uses ", name);
  }
  // pass 3: the product, model_type outermost and seed innermost; a repeated name (the
  // Transformer's collapsed axes) keeps its first place.
  std::set<std::string> names;
  for (const json& model_type : values_or_null(axes, "model_type"))
    for (const json& hybrid : values_or_null(axes, "hybrid"))
      for (const json& routing : values_or_null(axes, "routing"))
        for (const json& optimizer : values_or_null(axes, "optimizer")) {
          const std::string opt = optimizer.is_null() ? shared.optim.optim.name : optimizer.get<std::string>();
          const std::string lr_key = axes.count("lr_" + opt) ? "lr_" + opt : "lr";
          for (const json& lr : values_or_null(axes, lr_key))
            for (const json& seed : values_or_null(axes, "seed")) {
              const GridPoint p{model_type, hybrid, routing, optimizer, lr, seed};
              const json run_file = point_run_file(file, p, shared.model.fields.num_hidden_layers, source);
              SweepRun run = make_run(run_file, source);
              if (names.insert(run.name).second) sweep.runs.push_back(std::move(run));
            }
        }
  return sweep;
}

Sweep read_sweep_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HLA_CHECK_INPUT(in, path, ": cannot open the sweep file (", std::strerror(errno), ")");
  std::stringstream text;
  text << in.rdbuf();
  return parse_sweep(text.str(), path);
}

std::vector<SweepRun> select_runs(const std::vector<SweepRun>& runs, const std::string& patterns) {
  if (patterns.empty()) return runs;
  std::vector<std::string> list;
  std::stringstream in(patterns);
  for (std::string p; std::getline(in, p, ',');)
    if (!p.empty()) list.push_back(p);
  std::vector<SweepRun> kept;
  std::set<std::string> matched;
  for (const SweepRun& run : runs) {
    bool keep = false;
    for (const std::string& p : list)
      if (fnmatch(p.c_str(), run.name.c_str(), 0) == 0) {
        keep = true;
        matched.insert(p);
      }
    if (keep) kept.push_back(run);
  }
  for (const std::string& p : list)
    HLA_CHECK_INPUT(matched.count(p), "--only: the pattern '", p, "' matches no run of the grid (",
                    runs.size(), " runs; --dry-run lists them)");
  return kept;
}

std::string run_file_text(const json& sections) {
  auto value_text = [](const json& v) {
    if (!v.is_string()) return v.dump(-1, ' ', false, json::error_handler_t::strict);
    std::string out = "\"";
    for (char c : v.get<std::string>()) {
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else out += c;
    }
    return out + "\"";
  };
  std::string text;
  for (const char* name : {"model", "data", "optim", "train"}) {
    if (!sections.contains(name)) continue;
    text += std::string(text.empty() ? "" : "\n") + "[" + name + "]\n";
    for (auto item = sections[name].begin(); item != sections[name].end(); ++item)
      text += item.key() + " = " + value_text(*item) + "\n";
  }
  return text;
}

std::string describe_runs(const std::vector<SweepRun>& runs) {
  std::ostringstream os;
  os << runs.size() << " run" << (runs.size() == 1 ? "" : "s") << ":\n";
  size_t width = 0;
  for (const SweepRun& run : runs) width = std::max(width, run.name.size());
  for (const SweepRun& run : runs) {
    os << "  " << run.name << std::string(width - run.name.size() + 2, ' ');
    for (auto it = run.axes.begin(); it != run.axes.end(); ++it)
      os << (it == run.axes.begin() ? "" : " ") << it.key() << "="
         << (it->is_string() ? it->get<std::string>() : it->dump());
    os << "\n";
  }
  return os.str();
}

}  // namespace hla::sweep
