#include "group/split.h"

#include <cstddef>

namespace dp {

void split_batch(int64_t batch, int devices, SplitMode mode, std::vector<int64_t>& sizes) {
  sizes.clear();
  if (batch <= 0 || devices <= 0) return;
  if (mode == SplitMode::kChunk) {
    int64_t chunk = (batch + devices - 1) / devices;
    for (int64_t left = batch; left > 0; left -= chunk) sizes.push_back(left < chunk ? left : chunk);
  } else {
    for (int i = 0; i < devices; ++i) {
      int64_t s = batch / devices + (i < batch % devices ? 1 : 0);
      if (s > 0) sizes.push_back(s);
    }
  }
}

void split_share(int64_t batch, int devices, SplitMode mode, int first_device, int count, int64_t* first_row,
                 int64_t* rows) {
  std::vector<int64_t> sizes;
  split_batch(batch, devices, mode, sizes);
  *first_row = 0;
  *rows = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (static_cast<int>(d) < first_device) *first_row += sizes[d];
    else if (static_cast<int>(d) < first_device + count) *rows += sizes[d];
  }
}

}  // namespace dp
