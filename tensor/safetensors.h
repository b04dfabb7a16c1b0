// safetensors read/write: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the raw little-endian data. Tensors keep the order they were given in.
//
// Writes go to "<path>.tmp" and are renamed over <path> only when complete, so a failed write
// never destroys the previous file. Reads validate everything and name the file and tensor
// in every error: truncated file, bad header length, bad JSON, unknown dtype, offsets out of
// range, overlapping or mismatched with dtype x shape.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace hla {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  NamedTensors tensors;  // CPU tensors, in file order
  std::map<std::string, std::string> metadata;
  const Tensor& get(const std::string& name) const;  // error naming the file if absent
  std::string path;
};

SafetensorsFile load_safetensors(const std::string& path);

}  // namespace hla
