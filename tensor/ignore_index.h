// The target id that means "no loss at this position" (PyTorch's and fla's -100). The data
// generators and loaders write it into (B, T) target tensors; cross_entropy skips it and the
// metrics do not count it. A leaf header, so data/ and nn/ share one definition without
// including each other.
#pragma once
#include <cstdint>

namespace hla {

constexpr int32_t kIgnoreIndex = -100;

}  // namespace hla
