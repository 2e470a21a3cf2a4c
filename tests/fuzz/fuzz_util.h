// Helpers shared by the fuzz targets (tests/fuzz/README.md): the input as a
// file (a memfd, for readers that take a path), a cursor that splits the
// input into fields, and the rule for what counts as a finding.
#pragma once
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"

namespace dp::fuzz {

// A file in memory holding `bytes`, named by a path any open() accepts
// (/proc/self/fd/N): no disk, nothing left behind.
class MemFile {
 public:
  MemFile(const void* bytes, size_t n) {
    fd_ = memfd_create("dp-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) abort_with("memfd_create failed");
    const auto* p = static_cast<const char*>(bytes);
    while (n > 0) {
      ssize_t w = write(fd_, p, n);
      if (w <= 0) abort_with("write to memfd failed");
      p += w;
      n -= static_cast<size_t>(w);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  explicit MemFile(const std::vector<uint8_t>& v) : MemFile(v.data(), v.size()) {}
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

  [[noreturn]] static void abort_with(const char* why) {
    std::fprintf(stderr, "fuzz harness: %s\n", why);
    std::abort();
  }

 private:
  int fd_ = -1;
  std::string path_;
};

// Reads fields off the front of the input; past the end, zeros and empty
// strings (so every input decodes to something).
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  size_t left() const { return n_; }
  uint8_t u8() {
    if (!n_) return 0;
    --n_;
    return *p_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(u8()) << (8 * i);
    return v;
  }
  double f64() {
    uint64_t b = u64();
    double d;
    std::memcpy(&d, &b, sizeof d);
    return d;
  }
  std::vector<uint8_t> bytes(size_t n) {
    if (n > n_) n = n_;
    std::vector<uint8_t> v(p_, p_ + n);
    p_ += n, n_ -= n;
    return v;
  }
  std::vector<uint8_t> rest() { return bytes(n_); }
  std::string str(size_t n) {
    auto v = bytes(n);
    return std::string(v.begin(), v.end());
  }
  std::string rest_str() { return str(n_); }

 private:
  const uint8_t* p_;
  size_t n_;
};

// The bytes gzip-compressed (a .gz file's content), so that targets reading
// through zlib see both kinds.
inline std::vector<uint8_t> gzip(const std::vector<uint8_t>& in) {
  z_stream z;
  std::memset(&z, 0, sizeof z);
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) MemFile::abort_with("deflateInit2");
  std::vector<uint8_t> out(deflateBound(&z, in.size()) + 32);
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) MemFile::abort_with("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// An expected failure (dp::Error): printed when DP_FUZZ_VERBOSE is set, to
// see how far a saved input gets.
inline void expected(const dp::Error& e) {
  static const bool verbose = std::getenv("DP_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "  dp::Error %d: %s\n", static_cast<int>(e.status()), e.what());
}

// A finding: a property the target checks after a successful call failed.
#define DP_FUZZ_CHECK(cond)                                                              \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

}  // namespace dp::fuzz
