// Fuzz target: a loader's JSON config (LoaderConfig::from_json), and a
// loader with that config over a small in-memory dataset (sample i: a
// 1x4x4 image of value i, label i), optionally with a crop, flip and
// normalize transform: two epochs, a seek, and the batches checked (every
// sample once per epoch, unless drop_last drops the short batch).
// Input: one byte (bit 0: the transform; bits 1-7: dataset length 0-127),
// two bytes of seek position, then the JSON text.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/loader.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dp::fuzz::Cursor in(data, size);
  const uint8_t flags = in.u8();
  const uint8_t seek_epoch = in.u8(), seek_batch = in.u8();
  const std::string text = in.rest_str();
  dp::LoaderConfig cfg;
  try {
    cfg = dp::LoaderConfig::from_json(text);
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
    return 0;
  }
  DP_FUZZ_CHECK(cfg.batch_size >= 1 && cfg.num_workers >= 0 && cfg.prefetch >= 1);
  // The loader itself only at sizes a test machine runs quickly.
  if (cfg.num_workers > 3 || cfg.prefetch > 4 || cfg.batch_size > 256) return 0;

  const int64_t n = flags >> 1;
  const dp::Shape sample{1, 4, 4};
  std::vector<float> xs(static_cast<size_t>(n * 16));
  std::vector<int64_t> ys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ys[static_cast<size_t>(i)] = i;
    for (int j = 0; j < 16; ++j) xs[static_cast<size_t>(i * 16 + j)] = static_cast<float>(i);
  }
  try {
    auto ds = dp::make_array_dataset(xs.data(), sample, n, DP_I64, ys.data(), dp::Shape{}, true);
    std::shared_ptr<const dp::Transform> tf;
    if (flags & 1)
      tf = dp::Transform::from_json(
          R"({"random_crop": {"size": 3, "padding": 1}, "horizontal_flip": 0.5, "normalize": {"mean": [0.5], "std": [2]}})", sample);
    dp::Loader loader(ds, tf, cfg);
    const int64_t k = loader.num_batches();
    DP_FUZZ_CHECK(k == (cfg.drop_last ? n / cfg.batch_size : (n + cfg.batch_size - 1) / cfg.batch_size));
    dp::Tensor x, y;
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<int> seen(static_cast<size_t>(n), 0);
      int64_t total = 0;
      for (int64_t b = 0; b <= k; ++b) {
        DP_FUZZ_CHECK(loader.epoch() == epoch && loader.batch() == b);
        int64_t rows = loader.next(x, y);
        if (b == k) {
          DP_FUZZ_CHECK(rows == 0);
          break;
        }
        DP_FUZZ_CHECK(rows >= 1 && rows <= cfg.batch_size && y.shape()[0] == rows && x.shape()[0] == rows);
        const auto* t = static_cast<const int64_t*>(y.data());
        for (int64_t r = 0; r < rows; ++r) {
          DP_FUZZ_CHECK(t[r] >= 0 && t[r] < n);
          ++seen[static_cast<size_t>(t[r])];
          if (!tf) DP_FUZZ_CHECK(static_cast<const float*>(x.data())[r * 16] == static_cast<float>(t[r]));
        }
        total += rows;
      }
      for (int s : seen) DP_FUZZ_CHECK(s <= 1);
      DP_FUZZ_CHECK(total == (cfg.drop_last ? k * cfg.batch_size : n));
    }
    loader.seek(seek_epoch, k ? seek_batch % (k + 1) : 0);
    loader.next(x, y);
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
  }
  return 0;
}
