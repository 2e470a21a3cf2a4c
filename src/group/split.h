// How a batch of B rows is divided among n devices.
#pragma once
#include <cstdint>
#include <vector>

namespace dp {

enum class SplitMode { kChunk = 0, kBalanced = 1 };

// Sizes of the non-empty parts, in device order. kChunk is torch.chunk's rule:
// parts of ceil(B/n) rows, the last one smaller, and fewer than n parts when B
// is small (10 on 8 devices: 2,2,2,2,2). kBalanced: sizes differ by at most
// one (30 on 8: 4,4,4,4,4,4,3,3). Writes into `sizes` (resized; no allocation
// once its capacity is n).
void split_batch(int64_t batch, int devices, SplitMode mode, std::vector<int64_t>& sizes);

// The rows of devices [first_device, first_device + count) in that split:
// from *first_row, *rows of them (a process's share of a global batch).
// Allocates nothing.
void split_share(int64_t batch, int devices, SplitMode mode, int first_device, int count, int64_t* first_row,
                 int64_t* rows);

}  // namespace dp
