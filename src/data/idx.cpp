// IDX files (MNIST, Fashion-MNIST): a big-endian magic number 0x00000803
// (unsigned bytes, 3 dims) or 0x00000801 (1 dim), the dims as big-endian
// 32-bit words, then the data. Pixels stay uint8 in memory (a quarter of the
// float size: 47 MB for Fashion-MNIST's training set) and become float / 255
// as samples are read, exactly as torchvision's ToTensor computes them.
#include <cstdint>
#include <cstdio>

#include "core/error.h"
#include "data/dataset.h"
#include "data/gzfile.h"
#include "data/pixels.h"

namespace dp {

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;
// Sizes beyond this are a corrupt header, not a dataset (2^40 pixels).
constexpr uint64_t kMaxBytes = uint64_t(1) << 40;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

void check_magic(GzFile& f, uint32_t expected, const char* what) {
  uint32_t magic = f.read_be32("magic number");
  if (magic != expected)
    f.corrupt("bad magic " + hex32(magic) + " at byte 0, expected " + hex32(expected) + " (" + what + ")");
}

// A count may be 0 (an empty set); an image side may not.
uint32_t read_dim(GzFile& f, const char* what, bool allow_zero) {
  uint64_t at = f.offset();
  uint32_t v = f.read_be32(what);
  if (v == 0 && !allow_zero) f.corrupt("bad " + std::string(what) + " 0 at byte " + std::to_string(at));
  return v;
}

class IdxDataset : public Dataset {
 public:
  IdxDataset(int64_t rows, int64_t cols, std::vector<uint8_t> pixels, std::vector<uint8_t> labels)
      : Dataset(Shape{1, rows, cols}, DP_I64, Shape{}), pixels_(std::move(pixels)), labels_(std::move(labels)) {}

  int64_t length() const override { return static_cast<int64_t>(labels_.size()); }

  void get(int64_t index, float* input, void* target) const override {
    int64_t n = sample_numel();
    bytes_to_unit_floats(pixels_.data() + index * n, n, input);
    *static_cast<int64_t*>(target) = labels_[static_cast<size_t>(index)];
  }

 private:
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
};

}  // namespace

std::shared_ptr<Dataset> load_idx(const std::string& images_path, const std::string& labels_path) {
  GzFile images(images_path);
  check_magic(images, kImagesMagic, "IDX images");
  uint32_t count = read_dim(images, "image count", true);
  uint32_t rows = read_dim(images, "row count", false);
  uint32_t cols = read_dim(images, "column count", false);
  // rows * cols < 2^64; the product with count is checked before it is formed.
  uint64_t per_image = uint64_t(rows) * cols;
  if (per_image > kMaxBytes || count > kMaxBytes / per_image)
    images.corrupt("implausible dims " + std::to_string(count) + " x " + std::to_string(rows) + " x " + std::to_string(cols) +
                   " at byte 4");

  // The labels' header before the pixels: a count mismatch is reported
  // without reading 47 MB first.
  GzFile labels(labels_path);
  check_magic(labels, kLabelsMagic, "IDX labels");
  uint32_t label_count = read_dim(labels, "label count", true);
  if (label_count != count)
    labels.corrupt("label count " + std::to_string(label_count) + " at byte 4 does not match the image count " +
                   std::to_string(count) + " of " + images_path);

  std::vector<uint8_t> pixels, label_bytes;
  images.read_exact(pixels, count * per_image, "pixels");
  images.expect_end("pixels");
  labels.read_exact(label_bytes, count, "labels");
  labels.expect_end("labels");
  return std::make_shared<IdxDataset>(rows, cols, std::move(pixels), std::move(label_bytes));
}

}  // namespace dp
