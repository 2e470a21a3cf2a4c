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

// The rows of devices [0, d) under split_batch's rules, in closed form (a
// sharded loader asks once per batch, from its worker threads: no allocation).
static int64_t rows_before(int64_t batch, int devices, SplitMode mode, int64_t d) {
  if (batch <= 0 || devices <= 0) return 0;
  if (d >= devices) return batch;
  if (mode == SplitMode::kChunk) {
    const int64_t chunk = (batch + devices - 1) / devices;
    return d * chunk < batch ? d * chunk : batch;
  }
  return d * (batch / devices) + (d < batch % devices ? d : batch % devices);
}

void split_share(int64_t batch, int devices, SplitMode mode, int first_device, int count, int64_t* first_row,
                 int64_t* rows) {
  *first_row = rows_before(batch, devices, mode, first_device);
  *rows = rows_before(batch, devices, mode, first_device + count) - *first_row;
}

}  // namespace dp
