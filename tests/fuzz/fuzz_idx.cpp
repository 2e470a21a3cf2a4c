// Fuzz target: the IDX reader (MNIST, Fashion-MNIST: data/idx.cpp through
// data/gzfile.*), plain or gzip-compressed. A dataset that loads is read
// at its first and last samples.
// Input: one byte of flags (bit 0: gzip the images file, bit 1: the
// labels file), two bytes (little-endian) of the images file's length,
// the images file, then the labels file.
#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "fuzz_util.h"

using dp::fuzz::MemFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dp::fuzz::Cursor in(data, size);
  const uint8_t flags = in.u8();
  std::vector<uint8_t> images = in.bytes(in.u16());
  std::vector<uint8_t> labels = in.rest();
  if (flags & 1) images = dp::fuzz::gzip(images);
  if (flags & 2) labels = dp::fuzz::gzip(labels);
  MemFile fi(images), fl(labels);
  std::shared_ptr<dp::Dataset> ds;
  try {
    ds = dp::load_idx(fi.path(), fl.path());
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
    return 0;
  }
  DP_FUZZ_CHECK(ds->length() >= 0 && ds->target_dtype() == DP_I64 && ds->sample_shape().ndim == 3);
  if (ds->length() == 0) return 0;
  std::vector<float> x(static_cast<size_t>(ds->sample_numel()));
  for (int64_t i : {int64_t{0}, ds->length() - 1}) {
    int64_t y = -1;
    ds->get(i, x.data(), &y);
    DP_FUZZ_CHECK(y >= 0 && y <= 255);
    for (float v : x) DP_FUZZ_CHECK(v >= 0.f && v <= 1.f);
  }
  return 0;
}
