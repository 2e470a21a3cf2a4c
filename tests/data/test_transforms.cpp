// Transforms: normalize's values, random crop and flip as torchvision's,
// random choices a pure function of (seed, epoch, sample index), and config
// errors that name the JSON path.
#include <map>
#include <set>

#include "data_util.h"

namespace {

// n images [C, H, W]; pixel p of image i is i * 100 + p + 1 (never 0, so a
// zero marks padding); target i.
dp_dataset* image_dataset(dp_context* ctx, int64_t n, int64_t c, int64_t h, int64_t w, std::vector<float>& store) {
  store.clear();
  std::vector<int64_t> tg;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < c * h * w; ++p) store.push_back(static_cast<float>(i * 100 + p + 1));
    tg.push_back(i);
  }
  int64_t shape[3] = {c, h, w};
  dp_dataset* ds = nullptr;
  DP_REQUIRE_OK(dp_dataset_from_arrays(ctx, store.data(), 3, shape, n, DP_I64, tg.data(), 0, nullptr, 0, &ds));
  return ds;
}

// sample index -> transformed image, for one epoch of a loader.
std::map<int64_t, std::vector<float>> epoch_images(dp_loader* l, Fixture& f) {
  std::map<int64_t, std::vector<float>> out;
  for (;;) {
    int64_t rows = 0;
    DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
    if (rows == 0) return out;
    auto x = contents<float>(f.x);
    auto y = contents<int64_t>(f.y);
    size_t per = x.size() / static_cast<size_t>(rows);
    for (int64_t r = 0; r < rows; ++r) out[y[r]] = std::vector<float>(x.begin() + r * per, x.begin() + (r + 1) * per);
  }
}

dp_loader* loader(dp_dataset* ds, const std::string& cfg) {
  dp_loader* l = nullptr;
  DP_REQUIRE_OK(dp_loader_create(ds, cfg.c_str(), &l));
  return l;
}

}  // namespace

TEST_CASE("transform: normalize per channel, (x - mean) / std") {
  Fixture f;
  std::vector<float> store;
  dp_dataset* ds = image_dataset(f.ctx, 3, 2, 2, 2, store);
  DP_REQUIRE_OK(dp_dataset_set_transform(ds, R"({"normalize": {"mean": [0.5, 100], "std": [2, 0.25]}})"));
  dp_loader* l = loader(ds, R"({"batch_size": 3})");
  int64_t rows = 0;
  DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
  auto x = contents<float>(f.x);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t p = 0; p < 8; ++p) {
      float v = store[static_cast<size_t>(i * 8 + p)];
      float want = p < 4 ? (v - 0.5f) / 2.0f : (v - 100.0f) / 0.25f;
      CHECK(x[static_cast<size_t>(i * 8 + p)] == want);
    }
  dp_loader_destroy(l);
  // "{}" removes the transform (for loaders created afterwards).
  DP_REQUIRE_OK(dp_dataset_set_transform(ds, "{}"));
  l = loader(ds, R"({"batch_size": 3})");
  DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
  CHECK(contents<float>(f.x) == store);
  dp_loader_destroy(l);
  dp_dataset_destroy(ds);
}

TEST_CASE("transform: bad configs name the JSON path and change nothing") {
  Fixture f;
  std::vector<float> store;
  dp_dataset* ds = image_dataset(f.ctx, 2, 3, 4, 4, store);
  DP_REQUIRE_OK(dp_dataset_set_transform(ds, R"({"horizontal_flip": 1.0})"));
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"normalize": {"mean": [0.5], "std": [1]}})"), DP_ERR_MODEL,
              "/normalize/mean: expected a list of 3 numbers");
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"normalize": {"mean": [0, 0, 0], "std": [1, 0, 1]}})"), DP_ERR_MODEL,
              "/normalize/std/1: expected a positive number, got 0");
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"normalize": {"mean": [0, 0, 0], "std": [1, 1, -1]}})"), DP_ERR_MODEL,
              "/normalize/std/2: expected a positive number, got -1");
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"normalize": {"mean": [0, 0, 0]}})"), DP_ERR_MODEL, "/normalize/std: missing");
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"random_crop": {"size": 9, "padding": 2}})"), DP_ERR_MODEL,
              "/random_crop/size", "does not fit");
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"random_crop": {"size": 0}})"), DP_ERR_MODEL, "/random_crop/size");
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"random_crop": {"size": 3, "pad": 1}})"), DP_ERR_MODEL,
              "/random_crop/pad: unknown key", "(known: padding, size)");
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"horizontal_flip": 1.5})"), DP_ERR_MODEL, "/horizontal_flip");
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"vertical_flip": 0.5})"), DP_ERR_MODEL, "/vertical_flip: unknown key",
              "(known: horizontal_flip, normalize, random_crop)");
  // Every valid key is listed, not only those the object happened to hold.
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"horizontal_flip": 0.5, "normalise": {"mean": [0, 0, 0], "std": [1, 1, 1]}})"),
              DP_ERR_MODEL, "/normalise: unknown key 'normalise' for transform (known: horizontal_flip, normalize, random_crop)");
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"normalize": {"mean": [0, 0, 0], "std": [1, 1, 1], "stdev": 1}})"),
              DP_ERR_MODEL, "/normalize/stdev: unknown key", "(known: mean, std)");
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"horizontal_flip": )"), DP_ERR_JSON, "transform JSON");
  // Found by tests/fuzz: a number beyond double, a padding whose double overflows.
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"horizontal_flip": 1e999})"), DP_ERR_JSON, "transform JSON", "number overflow");
  CHECK_FAILS(dp_dataset_set_transform(ds, R"({"random_crop": {"size": 3, "padding": 4611686018427387904}})"),
              DP_ERR_MODEL, "/random_crop/padding: 4611686018427387904 is too large");
  // The flip set first is still in force: every image mirrored.
  dp_loader* l = loader(ds, R"({"batch_size": 2})");
  int64_t rows = 0;
  DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
  auto x = contents<float>(f.x);
  CHECK(x[0] == store[3]);
  CHECK(x[3] == store[0]);
  dp_loader_destroy(l);

  // Crop and flip need (..., H, W) samples.
  int64_t flat_shape = 4;
  float in[8] = {};
  int64_t tg[2] = {};
  dp_dataset* flat = nullptr;
  DP_REQUIRE_OK(dp_dataset_from_arrays(f.ctx, in, 1, &flat_shape, 2, DP_I64, tg, 0, nullptr, 0, &flat));
  CHECK_FAILS(dp_dataset_set_transform(flat, R"({"horizontal_flip": 0.5})"), DP_ERR_MODEL, "/horizontal_flip", "2 dims");
  DP_REQUIRE_OK(dp_dataset_set_transform(flat, R"({"normalize": {"mean": [1, 2, 3, 4], "std": [1, 1, 1, 1]}})"));
  dp_dataset_destroy(flat);
  // (H, W) samples: normalize follows the crop, so its channels are the cropped rows.
  int64_t hw_shape[2] = {2, 4};
  dp_dataset* hw = nullptr;
  DP_REQUIRE_OK(dp_dataset_from_arrays(f.ctx, in, 2, hw_shape, 1, DP_I64, tg, 0, nullptr, 0, &hw));
  CHECK_FAILS(dp_dataset_set_transform(hw, R"({"random_crop": {"size": 1}, "normalize": {"mean": [0, 0], "std": [1, 1]}})"),
              DP_ERR_MODEL, "/normalize/mean: expected a list of 1 numbers");
  DP_REQUIRE_OK(dp_dataset_set_transform(hw, R"({"random_crop": {"size": 1}, "normalize": {"mean": [0], "std": [1]}})"));
  dp_dataset_destroy(hw);
  dp_dataset_destroy(ds);
}

TEST_CASE("transform: random crop and flip as torchvision, a pure function of (seed, epoch, index)") {
  Fixture f;
  std::vector<float> store;
  const int64_t n = 40, c = 2, h = 5, w = 6, size_h = 4, size_w = 5, pad = 2;
  dp_dataset* ds = image_dataset(f.ctx, n, c, h, w, store);
  DP_REQUIRE_OK(dp_dataset_set_transform(ds, R"({"random_crop": {"size": [4, 5], "padding": 2}, "horizontal_flip": 0.5})"));
  int nd = 0;
  int64_t s[DP_MAX_DIMS];
  DP_REQUIRE_OK(dp_dataset_sample_shape(ds, &nd, s));
  REQUIRE(nd == 3);
  CHECK(s[0] == c);
  CHECK(s[1] == size_h);
  CHECK(s[2] == size_w);

  // Every output is some crop of the zero-padded image, maybe mirrored.
  auto candidate = [&](int64_t i, int64_t top, int64_t left, bool flip) {
    std::vector<float> out;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < size_h; ++y)
        for (int64_t x = 0; x < size_w; ++x) {
          int64_t xx = flip ? size_w - 1 - x : x;
          int64_t sy = y + top - pad, sx = xx + left - pad;
          bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
          out.push_back(inside ? store[static_cast<size_t>(i * c * h * w + ch * h * w + sy * w + sx)] : 0.0f);
        }
    return out;
  };

  dp_loader* a = loader(ds, R"({"batch_size": 7, "shuffle": true, "seed": 11, "num_workers": 2})");
  dp_loader* b = loader(ds, R"({"batch_size": 1, "shuffle": false, "seed": 11})");
  dp_loader* other_seed = loader(ds, R"({"batch_size": 40, "seed": 12})");
  auto a0 = epoch_images(a, f), a1 = epoch_images(a, f);
  auto b0 = epoch_images(b, f), b1 = epoch_images(b, f);
  auto c0 = epoch_images(other_seed, f);
  REQUIRE(a0.size() == static_cast<size_t>(n));
  // Same (seed, epoch, index): same image, whatever the batch size, order or workers.
  CHECK(a0 == b0);
  CHECK(a1 == b1);
  CHECK(a0 != a1);
  CHECK(a0 != c0);

  std::set<std::pair<int64_t, int64_t>> offsets;
  int flips = 0, unchanged = 0;
  for (const auto& [i, img] : a0) {
    int matches = 0;
    for (int64_t top = 0; top <= h + 2 * pad - size_h; ++top)
      for (int64_t left = 0; left <= w + 2 * pad - size_w; ++left)
        for (bool flip : {false, true})
          if (candidate(i, top, left, flip) == img) {
            ++matches;
            offsets.insert({top, left});
            flips += flip;
            unchanged += (top == pad && left == pad && !flip);
          }
    CHECK(matches == 1);
  }
  CHECK(offsets.size() > 5);  // the crops move
  CHECK(flips > 5);           // about half of 40 are mirrored
  CHECK(flips < 35);
  CHECK(unchanged < 10);
  dp_loader_destroy(a);
  dp_loader_destroy(b);
  dp_loader_destroy(other_seed);
  dp_dataset_destroy(ds);
}

TEST_CASE("transform: a padding wider than the crop (found by tests/fuzz: rows were zero-filled past their end)") {
  Fixture f;
  std::vector<float> store;
  const int64_t n = 30, h = 3, w = 3;
  dp_dataset* ds = image_dataset(f.ctx, n, 2, h, w, store);
  DP_REQUIRE_OK(dp_dataset_set_transform(ds, R"({"random_crop": {"size": 4, "padding": 21}})"));
  dp_loader* l = loader(ds, R"({"batch_size": 30})");
  // Most crops lie wholly in the padding; the rest hold some of the image's pixels.
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto images = epoch_images(l, f);
    REQUIRE(images.size() == static_cast<size_t>(n));
    for (const auto& [i, img] : images) {
      REQUIRE(img.size() == 2 * 4 * 4);
      for (float v : img) CHECK((v == 0.0f || (v > i * 100 && v <= i * 100 + 2 * h * w)));
    }
  }
  dp_loader_destroy(l);
  dp_dataset_destroy(ds);
}
