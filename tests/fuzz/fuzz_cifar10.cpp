// Fuzz target: the CIFAR-10 reader (data/cifar10.cpp through
// data/gzfile.*), one file or two (a dataset of several batches), plain or
// gzip-compressed. A dataset that loads is read at its first and last samples.
// Input: one byte of flags (bit 0: gzip the files; bit 1: two files), with
// two files two bytes (little-endian) of the first one's length; then the
// file(s).
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "fuzz_util.h"

using dp::fuzz::MemFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dp::fuzz::Cursor in(data, size);
  const uint8_t flags = in.u8();
  std::vector<std::vector<uint8_t>> parts;
  if (flags & 2) parts.push_back(in.bytes(in.u16()));
  parts.push_back(in.rest());
  std::vector<std::unique_ptr<MemFile>> files;
  std::vector<std::string> paths;
  for (auto& p : parts) {
    files.push_back(std::make_unique<MemFile>((flags & 1) ? dp::fuzz::gzip(p) : p));
    paths.push_back(files.back()->path());
  }
  std::shared_ptr<dp::Dataset> ds;
  try {
    ds = dp::load_cifar10(paths);
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
    return 0;
  }
  DP_FUZZ_CHECK(ds->length() >= 1 && ds->sample_numel() == 3 * 32 * 32 && ds->target_dtype() == DP_I64);
  std::vector<float> x(static_cast<size_t>(ds->sample_numel()));
  for (int64_t i : {int64_t{0}, ds->length() - 1}) {
    int64_t y = -1;
    ds->get(i, x.data(), &y);
    DP_FUZZ_CHECK(y >= 0 && y <= 9);
    for (float v : x) DP_FUZZ_CHECK(v >= 0.f && v <= 1.f);
  }
  return 0;
}
