// safetensors I/O with full header validation (see safetensors.h).
#include "tensor/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "tensor/atomic_file.h"
#include "tensor/json.h"

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

  AtomicFile f(path);
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = static_cast<unsigned char>(n >> (8 * i));
  f.write(len, 8);
  f.write(json);
  for (const auto& [name, t] : tensors) {
    Tensor c = t.to(Device::CPU);
    f.write(c.raw(), c.nbytes());
  }
  f.commit();
}

const Tensor& SafetensorsFile::get(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  fail(path, ": no tensor named '", name, "'");
}

namespace {

using nlohmann::json;

// One header entry, validated: its bytes are [begin, end) of the data section. An F16 entry
// (half) is read into an F32 tensor: hla has no half dtype, and every half value is exactly an
// fp32 value.
struct Entry {
  std::string name;
  DType dtype;  // of the tensor read; F32 for a half entry
  bool half;
  Shape shape;
  uint64_t begin, end;
};

constexpr char kHalfName[] = "F16";

// IEEE binary16 -> binary32, exact: sign, 5-bit exponent (bias 15), 10-bit fraction. Normal
// values rebias the exponent to 127; subnormals are fraction * 2^-24 (exact in fp32); the all-ones
// exponent is inf (fraction 0) or NaN (its payload kept).
float half_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, fraction = h & 0x3ffu;
  uint32_t u = sign;
  if (exponent == 0x1f) u |= 0x7f800000u | (fraction << 13);
  else if (exponent != 0) u |= ((exponent + (127 - 15)) << 23) | (fraction << 13);
  else if (fraction != 0) {
    float magnitude = static_cast<float>(fraction) * 0x1p-24f;
    uint32_t m;
    std::memcpy(&m, &magnitude, 4);
    u |= m;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// nlohmann keeps the last value of a key given twice, so a tensor name used twice would silently
// drop a tensor, and a field given twice in one entry ("shape" twice) would silently pick one.
// This SAX pass over the header text (after parse_json bounded its depth) keeps the keys of
// every open object and fails on the first repeat, naming the tensor it sits in.
class UniqueKeys : public json::json_sax_t {
 public:
  explicit UniqueKeys(const std::string& path) : path_(path) {}
  bool start_object(size_t) override {
    open_.emplace_back();
    return true;
  }
  bool key(std::string& k) override {
    if (open_.size() == 1) tensor_ = k;
    if (!open_.back().insert(k).second) {
      if (open_.size() == 1) fail(path_, ": tensor name '", k, "' appears twice in the header");
      if (tensor_ == "__metadata__") fail(path_, ": __metadata__ key '", k, "' appears twice");
      fail(path_, ": tensor '", tensor_, "': field '", k, "' appears twice in its entry");
    }
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(size_t) override { return true; }
  bool end_array() override { return true; }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(json::number_integer_t) override { return true; }
  bool number_unsigned(json::number_unsigned_t) override { return true; }
  bool number_float(json::number_float_t, const std::string&) override { return true; }
  bool string(std::string&) override { return true; }
  bool binary(json::binary_t&) override { return true; }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) override {
    fail(path_, ": not valid JSON (", e.what(), ")");
  }

 private:
  const std::string& path_;
  std::vector<std::set<std::string>> open_;  // the keys of each object open here, outermost first
  std::string tensor_;        // the top-level key whose value is being read
};

void check_unique_keys(const std::string& header, const std::string& path) {
  UniqueKeys check(path);
  json::sax_parse(header, &check);
}

std::map<std::string, std::string> parse_metadata(const json& m, const std::string& path) {
  if (!m.is_object()) fail(path, ": __metadata__ is not an object of strings: ", json_excerpt(m));
  std::map<std::string, std::string> out;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it.value().is_string())
      fail(path, ": __metadata__ '", it.key(), "' is ", json_excerpt(it.value()), ", not a string");
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

Shape parse_shape(const json& j, DType dtype, const std::string& where) {
  Shape shape;
  if (j.is_array())
    for (const auto& d : j)
      if (d.is_number_integer()) shape.push_back(d.get<int64_t>());
  if (!j.is_array() || shape.size() != j.size()) fail(where, "shape ", json_excerpt(j), " is not a list of integers");
  try {
    check_shape_valid(shape, dtype);
  } catch (const Error& e) {
    fail(where, e.what());
  }
  return shape;
}

Entry parse_entry(const std::string& name, const json& info, const std::string& path) {
  const std::string where = path + ": tensor '" + name + "': ";
  if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
    fail(where, "entry needs dtype, shape and data_offsets: ", json_excerpt(info));
  Entry e{name, DType::F32, false, {}, 0, 0};
  const json& dtype = info["dtype"];
  e.half = dtype == kHalfName;
  if (!e.half && (!dtype.is_string() || !dtype_from_name(dtype.get<std::string>(), &e.dtype)))
    fail(where, "unknown dtype ", dtype.is_string() ? excerpt(dtype.get<std::string>()) : json_excerpt(dtype));
  e.shape = parse_shape(info["shape"], e.dtype, where);
  const json& offs = info["data_offsets"];
  if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
    fail(where, "data_offsets must be two non-negative integers: ", json_excerpt(offs));
  e.begin = offs[0].get<uint64_t>(), e.end = offs[1].get<uint64_t>();
  const uint64_t expected = static_cast<uint64_t>(e.half ? shape_numel(e.shape) * 2 : shape_nbytes(e.shape, e.dtype));
  if (e.begin > e.end || e.end - e.begin != expected)
    fail(where, "data_offsets [", e.begin, ", ", e.end, ") span ", e.end - e.begin, " bytes but ",
         e.half ? kHalfName : dtype_name(e.dtype), " ", shape_str(e.shape), " needs ", expected);
  return e;
}

// Sorted by offset, the tensors must tile the data section: no gap, no overlap, nothing after.
void check_coverage(const std::vector<Entry>& sorted, uint64_t data_size, const std::string& path) {
  if (sorted.empty()) {
    if (data_size > 0) fail(path, ": ", data_size, " byte(s) of the data section but no tensors");
    return;
  }
  uint64_t covered = 0;
  for (size_t i = 0; i < sorted.size(); i++) {
    const Entry& e = sorted[i];
    if (e.end > data_size)
      fail(path, ": tensor '", excerpt(e.name), "': data_offsets [", e.begin, ", ", e.end,
           ") out of range (data section is ", data_size, " bytes)");
    if (e.begin < covered)
      fail(path, ": tensors '", excerpt(sorted[i - 1].name), "' and '", excerpt(e.name), "' overlap in the data section");
    if (e.begin > covered)
      fail(path, ": bytes [", covered, ", ", e.begin, ") of the data section belong to no tensor (",
           i == 0 ? "before '" + excerpt(e.name) + "'" : "between '" + excerpt(sorted[i - 1].name) + "' and '" + excerpt(e.name) + "'", ")");
    covered = e.end;
  }
  if (covered < data_size)
    fail(path, ": ", data_size - covered, " byte(s) of the data section after the last tensor '", excerpt(sorted.back().name),
         "' belong to no tensor (is the header length right?)");
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail(path, ": cannot open safetensors file");
  const uint64_t file_size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  if (file_size < 8) fail(path, ": truncated: ", file_size, " bytes, no room for the 8-byte header length");
  unsigned char len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; i++) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n > file_size - 8)
    fail(path, ": bad header length ", n, " (file has ", file_size - 8, " bytes after the length)");
  std::string text(n, '\0');
  f.read(text.data(), static_cast<std::streamsize>(n));
  const json header = parse_json(text, path);
  if (!header.is_object()) fail(path, ": header is not a JSON object: ", json_excerpt(header));
  check_unique_keys(text, path);

  SafetensorsFile out;
  out.path = path;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") out.metadata = parse_metadata(it.value(), path);
    else entries.push_back(parse_entry(it.key(), it.value(), path));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  check_coverage(entries, file_size - 8 - n, path);
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    std::vector<uint16_t> half(e.half ? static_cast<size_t>(t.numel()) : 0);
    f.seekg(static_cast<std::streamoff>(8 + n + e.begin));
    f.read(e.half ? reinterpret_cast<char*>(half.data()) : static_cast<char*>(t.raw()),
           static_cast<std::streamsize>(e.end - e.begin));
    if (!f) fail(path, ": tensor '", e.name, "': read failed");
    if (e.half) {
      std::transform(half.begin(), half.end(), t.data<float>(), half_bits_to_f32);
      out.widened[e.name] = kHalfName;
    }
    out.tensors.emplace_back(e.name, t);
  }
  return out;
}

}  // namespace hla
