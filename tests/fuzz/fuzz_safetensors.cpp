// Fuzz target: reading a safetensors file (io/safetensors.h), header only
// and with data, and the metadata as dp_checkpoint_metadata returns it. A
// file that reads is written back with st_header and must read the same.
// Input: the file's bytes.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

using dp::fuzz::MemFile;

namespace {

bool same(const dp::io::StFile& a, const dp::io::StFile& b) {
  if (a.entries.size() != b.entries.size() || a.metadata != b.metadata) return false;
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const auto &x = a.entries[i], &y = b.entries[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.begin != y.begin || x.end != y.end) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  MemFile file(data, size);
  try {
    dp::io::read_metadata(file.path());
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
  }
  try {
    dp::io::StFile head = dp::io::read_safetensors(file.path(), false);
    DP_FUZZ_CHECK(head.data.empty());
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
  }
  dp::io::StFile f;
  try {
    f = dp::io::read_safetensors(file.path(), true);
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
    return 0;
  }
  // Every tensor's bytes lie inside the data, and all of them are read.
  uint64_t at = 0;
  unsigned sum = 0;
  for (const auto& e : f.entries) {
    DP_FUZZ_CHECK(e.begin == at && e.end >= e.begin && e.end <= f.data.size());
    DP_FUZZ_CHECK(f.find(e.name) == &e);
    DP_FUZZ_CHECK(f.by_name.count(e.name) == 1 && &f.entries[f.by_name.at(e.name)] == &e);
    const unsigned char* b = f.bytes(e);
    for (uint64_t i = 0; i < e.end - e.begin; ++i) sum += b[i];
    at = e.end;
  }
  DP_FUZZ_CHECK(at == f.data.size());
  (void)sum;

  // Written back (tensors in offset order, metadata in key order), it reads the same.
  std::vector<dp::io::StOut> outs;
  for (const auto& e : f.entries) outs.push_back({e.name, e.dtype, e.shape, f.bytes(e)});
  std::vector<std::pair<std::string, std::string>> meta(f.metadata.begin(), f.metadata.end());
  std::string again;
  try {
    again = dp::io::st_header(outs, meta);
  } catch (const dp::Error& e) {
    std::fprintf(stderr, "a file that reads does not write: %s\n", e.what());  // its names and metadata must
    std::abort();
  }
  again.append(f.data.begin(), f.data.end());
  MemFile copy(again.data(), again.size());
  dp::io::StFile g;
  try {
    g = dp::io::read_safetensors(copy.path(), true);
  } catch (const dp::Error& e) {
    std::fprintf(stderr, "rewritten file does not read: %s\n", e.what());
    std::abort();
  }
  DP_FUZZ_CHECK(same(f, g));
  DP_FUZZ_CHECK(f.data == g.data);
  return 0;
}
