// safetensors read/write: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the raw little-endian data. Tensors are written in the order given and read back in
// the order of their data.
//
// Writes go through tensor/atomic_file.h ("<path>.tmp-<pid>", every write checked, fsynced,
// renamed over <path> only when complete), so a failed write never destroys the previous file. Reads validate everything before allocating a tensor, and
// every error starts with the file and names the tensor: truncated file, bad header length,
// JSON that is invalid or nested deeper than kMaxJsonDepth, a name used twice, __metadata__
// that is not an object of strings, unknown dtype, a shape that is not a list of at most
// kMaxRank non-negative integers or whose byte count overflows int64, offsets that disagree
// with dtype x shape, and - as the format requires - tensors that do not tile the data section
// exactly (a gap, an overlap or trailing bytes: a header length one byte off shows up here).
//
// F16 (IEEE half, as torch's float16 is saved) is read widened to F32, exactly, and the tensor's
// name is listed in SafetensorsFile::widened: hla computes and stores nothing in half precision,
// so a half tensor is only ever an input to widen (fp16 checkpoints, nn/weights.h), and a Tensor
// dtype for it would be one more case in every kernel's dispatch for no use.
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
  std::map<std::string, std::string> widened;  // tensor -> the file's dtype where it was read wider ("F16")
  const Tensor& get(const std::string& name) const;  // error naming the file if absent
  std::string path;
};

SafetensorsFile load_safetensors(const std::string& path);

}  // namespace hla
