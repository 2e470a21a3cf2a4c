// uint8 pixels to floats in [0, 1], as torchvision's ToTensor: x / 255 in
// float32. A table of the 256 quotients gives the same bits as the division
// at the cost of a load.
#pragma once
#include <cstdint>

namespace dp {

inline const float* unit_float_table() {
  static const struct Table {
    float v[256];
    Table() {
      for (int i = 0; i < 256; ++i) v[i] = static_cast<float>(i) / 255.0f;
    }
  } table;
  return table.v;
}

inline void bytes_to_unit_floats(const uint8_t* src, int64_t n, float* dst) {
  const float* t = unit_float_table();
  for (int64_t i = 0; i < n; ++i) dst[i] = t[src[i]];
}

}  // namespace dp
