// CIFAR-10 binary batches: records of 1 label byte (0..9) and 3072 pixel
// bytes (1024 red, 1024 green, 1024 blue, each row-major 32x32), with no
// header, so the file size must be a multiple of 3073. Several files (the
// five training batches) form one dataset, in the order given. Pixels stay
// uint8 in memory and become float / 255 on read, as for IDX.
#include "core/error.h"
#include "data/dataset.h"
#include "data/gzfile.h"
#include "data/pixels.h"

namespace dp {

namespace {

constexpr int64_t kPixels = 3 * 32 * 32;
constexpr int64_t kRecord = 1 + kPixels;
constexpr int kClasses = 10;

class Cifar10Dataset : public Dataset {
 public:
  Cifar10Dataset(std::vector<uint8_t> pixels, std::vector<uint8_t> labels)
      : Dataset(Shape{3, 32, 32}, DP_I64, Shape{}), pixels_(std::move(pixels)), labels_(std::move(labels)) {}

  int64_t length() const override { return static_cast<int64_t>(labels_.size()); }

  void get(int64_t index, float* input, void* target) const override {
    bytes_to_unit_floats(pixels_.data() + index * kPixels, kPixels, input);
    *static_cast<int64_t*>(target) = labels_[static_cast<size_t>(index)];
  }

 private:
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
};

void read_batch(const std::string& path, std::vector<uint8_t>& pixels, std::vector<uint8_t>& labels) {
  GzFile f(path);
  std::vector<uint8_t> data;
  f.read_rest(data);
  uint64_t size = data.size();
  if (size == 0) f.corrupt("empty file at byte 0, expected records of 3073 bytes (1 label + 3072 pixels)");
  if (size % kRecord != 0)
    f.corrupt("size " + std::to_string(size) + " bytes is not a multiple of 3073 (1 label + 3072 pixel bytes): the record at byte " +
              std::to_string(size / kRecord * kRecord) + " is truncated");
  uint64_t records = size / kRecord;
  for (uint64_t r = 0; r < records; ++r) {
    const uint8_t* rec = data.data() + r * kRecord;
    if (rec[0] >= kClasses)
      f.corrupt("bad label " + std::to_string(rec[0]) + " at byte " + std::to_string(r * kRecord) + ", expected 0..9");
  }
  labels.reserve(labels.size() + records);
  pixels.reserve(pixels.size() + records * kPixels);
  for (uint64_t r = 0; r < records; ++r) {
    const uint8_t* rec = data.data() + r * kRecord;
    labels.push_back(rec[0]);
    pixels.insert(pixels.end(), rec + 1, rec + kRecord);
  }
}

}  // namespace

std::shared_ptr<Dataset> load_cifar10(const std::vector<std::string>& paths) {
  if (paths.empty()) fail(DP_ERR_INVALID_ARGUMENT, "CIFAR-10: no files given");
  std::vector<uint8_t> pixels, labels;
  for (const auto& p : paths) read_batch(p, pixels, labels);
  pixels.shrink_to_fit();
  return std::make_shared<Cifar10Dataset>(std::move(pixels), std::move(labels));
}

}  // namespace dp
