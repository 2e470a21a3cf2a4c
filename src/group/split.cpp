#include "group/split.h"

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

}  // namespace dp
