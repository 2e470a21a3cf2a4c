#include "data/transform.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"
#include "core/args.h"

namespace dp {

using nlohmann::json;

// Counters of the random stream of one sample (uniform01(key, counter)).
enum : uint64_t { kCropTop = 0, kCropLeft = 1, kFlip = 2 };

std::shared_ptr<const Transform> Transform::from_json(const std::string& text, const Shape& sample) {
  const json doc = parse_config(text, "transform");
  Args a(doc, "");
  auto t = std::make_shared<Transform>();
  t->in_ = t->out_ = sample;
  bool any = false;
  auto need_image = [&](const char* key) {
    if (sample.ndim < 2 || sample.numel() == 0)
      fail(DP_ERR_MODEL, a.path_of(key) + ": needs non-empty samples of at least 2 dims (..., H, W), the dataset's are " +
                             sample.str());
  };

  if (a.has("random_crop")) {
    need_image("random_crop");
    a.accept("random_crop");
    Args c(doc["random_crop"], a.path_of("random_crop"));
    auto size = c.required_pair("size", 1);
    t->pad_ = c.integer("padding", 0, 0);
    c.finish("random_crop");
    int64_t h = sample[sample.ndim - 2], w = sample[sample.ndim - 1];
    // apply() computes in the padded image: its sides must fit in int64.
    int64_t pad2 = 0, ph = 0, pw = 0;
    if (__builtin_mul_overflow(t->pad_, int64_t{2}, &pad2) || __builtin_add_overflow(h, pad2, &ph) ||
        __builtin_add_overflow(w, pad2, &pw))
      fail(DP_ERR_MODEL, c.path_of("padding") + ": " + std::to_string(t->pad_) + " is too large for an image of " +
                             std::to_string(h) + "x" + std::to_string(w));
    if (size[0] > ph || size[1] > pw)
      fail(DP_ERR_MODEL, c.path_of("size") + ": a crop of " + std::to_string(size[0]) + "x" + std::to_string(size[1]) +
                             " does not fit the padded image of " + std::to_string(ph) + "x" + std::to_string(pw));
    t->crop_ = true;
    t->crop_h_ = size[0];
    t->crop_w_ = size[1];
    t->out_[sample.ndim - 2] = size[0];
    t->out_[sample.ndim - 1] = size[1];
    // The cropped sample's elements must be countable (as a tensor's: at most 2^59).
    int64_t n = 1;
    for (int i = 0; i < t->out_.ndim; ++i)
      if (__builtin_mul_overflow(n, t->out_[i], &n) || n > (int64_t{1} << 59))
        fail(DP_ERR_MODEL, c.path_of("size") + ": a crop of " + std::to_string(size[0]) + "x" + std::to_string(size[1]) +
                               " makes samples of " + t->out_.str() + ", too many elements (at most 2^59)");
    any = true;
  }

  if (a.has("horizontal_flip")) {
    need_image("horizontal_flip");
    t->flip_p_ = a.number("horizontal_flip", 0, 0, 1);
    any = any || t->flip_p_ > 0;
  }

  if (a.has("normalize")) {
    a.accept("normalize");
    if (sample.ndim < 1)
      fail(DP_ERR_MODEL, a.path_of("normalize") + ": needs samples with a channel dim, the dataset's are []");
    Args n(doc["normalize"], a.path_of("normalize"));
    // Normalize runs after the crop, so its channels are the cropped
    // sample's dim 0 (which a crop changes when the sample is just (H, W)).
    size_t channels = static_cast<size_t>(t->out_[0]);
    if (channels == 0)  // numbers() would then take a list of any length
      fail(DP_ERR_MODEL, a.path_of("normalize") + ": needs samples with at least one channel, the dataset's are " +
                             t->out_.str());
    for (const char* key : {"mean", "std"})
      if (!n.has(key))
        fail(DP_ERR_MODEL, n.path_of(key) + ": missing; expected a list of " + std::to_string(channels) +
                               " numbers (one per channel of " + t->out_.str() + ")");
    auto mean = n.numbers("mean", {}, channels, -1e30, 1e30);
    auto sd = n.numbers("std", {}, channels, -1e30, 1e30);  // each > 0, said below
    n.finish("normalize");
    for (size_t i = 0; i < sd.size(); ++i)
      if (!(sd[i] > 0))
        fail(DP_ERR_MODEL, n.path_of("std") + "/" + std::to_string(i) + ": expected a positive number, got " + json(sd[i]).dump());
    t->mean_.assign(mean.begin(), mean.end());
    t->std_.assign(sd.begin(), sd.end());
    any = true;
  }
  a.finish("transform");
  if (!any) return nullptr;
  return t;
}

void Transform::apply(const float* src, float* dst, uint64_t key) const {
  const int nd = in_.ndim;
  if (crop_) {
    // Padded coordinates: (top, left) in [0, H + 2p - size]; the source row
    // of output row y is y + top - p, zero where it falls in the padding.
    const int64_t h = in_[nd - 2], w = in_[nd - 1];
    const int64_t planes = in_.numel() / (h * w);
    const int64_t top = std::min<int64_t>(static_cast<int64_t>(uniform01(key, kCropTop) * float(h + 2 * pad_ - crop_h_ + 1)),
                                          h + 2 * pad_ - crop_h_);
    const int64_t left = std::min<int64_t>(static_cast<int64_t>(uniform01(key, kCropLeft) * float(w + 2 * pad_ - crop_w_ + 1)),
                                           w + 2 * pad_ - crop_w_);
    for (int64_t c = 0; c < planes; ++c) {
      const float* s = src + c * h * w;
      float* d = dst + c * crop_h_ * crop_w_;
      for (int64_t y = 0; y < crop_h_; ++y) {
        float* drow = d + y * crop_w_;
        int64_t sy = y + top - pad_;
        if (sy < 0 || sy >= h) {
          std::fill(drow, drow + crop_w_, 0.0f);
          continue;
        }
        // Columns x with 0 <= x + left - pad < w come from the source (none
        // when the crop lies in the padding: a padding wider than the crop).
        int64_t x0 = std::min<int64_t>(crop_w_, std::max<int64_t>(0, pad_ - left));
        int64_t x1 = std::min<int64_t>(crop_w_, w + pad_ - left);
        if (x1 < x0) x1 = x0;
        std::fill(drow, drow + x0, 0.0f);
        if (x1 > x0) std::memcpy(drow + x0, s + sy * w + (x0 + left - pad_), static_cast<size_t>(x1 - x0) * sizeof(float));
        std::fill(drow + x1, drow + crop_w_, 0.0f);
      }
    }
  } else if (src != dst) {
    std::memcpy(dst, src, static_cast<size_t>(in_.numel()) * sizeof(float));
  }

  if (flip_p_ > 0 && uniform01(key, kFlip) < flip_p_) {
    const int64_t w = out_[nd - 1];
    const int64_t rows = out_.numel() / w;
    for (int64_t r = 0; r < rows; ++r) std::reverse(dst + r * w, dst + (r + 1) * w);
  }

  if (!mean_.empty()) {
    // (x - mean) / std, as torchvision's Normalize computes it.
    const int64_t per_channel = out_.numel() / out_[0];
    for (size_t c = 0; c < mean_.size(); ++c) {
      float* p = dst + static_cast<int64_t>(c) * per_channel;
      const float m = mean_[c], s = std_[c];
      for (int64_t i = 0; i < per_channel; ++i) p[i] = (p[i] - m) / s;
    }
  }
}

}  // namespace dp
