// safetensors I/O with full header validation (see safetensors.h).
#include "tensor/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace hla {

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    HLA_CHECK(!header.contains(name), "save_safetensors ", path, ": duplicate tensor name '", name, "'");
    header[name] = {{"dtype", dtype_name(t.dtype())}, {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  uint64_t n = json.size();

  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    HLA_CHECK(f, "save_safetensors: cannot open ", tmp, " for writing");
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = static_cast<unsigned char>(n >> (8 * i));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(json.data(), static_cast<std::streamsize>(json.size()));
    for (const auto& [name, t] : tensors) {
      Tensor c = t.to(Device::CPU);
      f.write(static_cast<const char*>(c.raw()), static_cast<std::streamsize>(c.nbytes()));
    }
    f.flush();
    if (!f) {
      f.close();
      std::remove(tmp.c_str());
      fail("save_safetensors: write to ", tmp, " failed (disk full?); ", path, " is unchanged");
    }
  }
  HLA_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "save_safetensors: cannot rename ", tmp,
            " to ", path);
}

const Tensor& SafetensorsFile::get(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  fail(path, ": no tensor named '", name, "'");
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  HLA_CHECK(f, path, ": cannot open safetensors file");
  uint64_t file_size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  HLA_CHECK(file_size >= 8, path, ": truncated: ", file_size, " bytes, no room for the 8-byte header length");
  unsigned char len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; i++) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  HLA_CHECK(n <= file_size - 8, path, ": bad header length ", n, " (file has ", file_size - 8,
            " bytes after the length)");
  std::string json(n, '\0');
  f.read(json.data(), static_cast<std::streamsize>(n));
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(json);
  } catch (const std::exception& e) {
    fail(path, ": header is not valid JSON: ", e.what());
  }
  HLA_CHECK(header.is_object(), path, ": header is not a JSON object");
  uint64_t data_size = file_size - 8 - n;

  SafetensorsFile out;
  out.path = path;
  struct Span { uint64_t begin, end; std::string name; };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& info = it.value();
    if (name == "__metadata__") {
      HLA_CHECK(info.is_object(), path, ": __metadata__ is not an object");
      for (auto m = info.begin(); m != info.end(); ++m)
        out.metadata[m.key()] = m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
      continue;
    }
    HLA_CHECK(info.is_object() && info.contains("dtype") && info.contains("shape") &&
                  info.contains("data_offsets"),
              path, ": tensor '", name, "': entry needs dtype, shape and data_offsets");
    DType dtype;
    std::string dname = info["dtype"].is_string() ? info["dtype"].get<std::string>() : info["dtype"].dump();
    HLA_CHECK(dtype_from_name(dname, &dtype), path, ": tensor '", name, "': unknown dtype ", dname);
    Shape shape;
    try {
      shape = info["shape"].get<Shape>();
    } catch (const std::exception&) {
      fail(path, ": tensor '", name, "': shape is not a list of integers");
    }
    const auto& offs = info["data_offsets"];
    HLA_CHECK(offs.is_array() && offs.size() == 2 && offs[0].is_number_unsigned() && offs[1].is_number_unsigned(),
              path, ": tensor '", name, "': data_offsets must be two non-negative integers");
    uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    HLA_CHECK(begin <= end && end <= data_size, path, ": tensor '", name, "': data_offsets [", begin,
              ", ", end, ") out of range (data section is ", data_size, " bytes)");
    uint64_t expected = static_cast<uint64_t>(shape_numel(shape)) * dtype_size(dtype);
    HLA_CHECK(end - begin == expected, path, ": tensor '", name, "': data_offsets span ", end - begin,
              " bytes but ", dname, " ", shape_str(shape), " needs ", expected);
    spans.push_back({begin, end, name});
    Tensor t = Tensor::empty(shape, dtype);
    f.seekg(static_cast<std::streamoff>(8 + n + begin));
    f.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(expected));
    HLA_CHECK(f, path, ": tensor '", name, "': read failed (file truncated?)");
    out.tensors.emplace_back(name, t);
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); i++)
    HLA_CHECK(spans[i].begin >= spans[i - 1].end, path, ": tensors '", spans[i - 1].name, "' and '",
              spans[i].name, "' overlap in the data section");
  return out;
}

}  // namespace hla
