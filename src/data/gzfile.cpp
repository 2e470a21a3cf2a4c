#include "data/gzfile.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "core/error.h"

namespace dp {

GzFile::GzFile(std::string path) : path_(std::move(path)) {
  errno = 0;
  gz_ = gzopen(path_.c_str(), "rb");
  if (!gz_)
    fail(DP_ERR_IO, "cannot open '" + path_ + "': " + (errno ? std::strerror(errno) : "out of memory"));
  // A larger buffer than zlib's 8 KiB default: fewer read(2) calls for a
  // 47 MB file, the same result.
  gzbuffer(static_cast<gzFile>(gz_), 1 << 17);
}

GzFile::~GzFile() {
  if (gz_) gzclose(static_cast<gzFile>(gz_));
}

void GzFile::corrupt(const std::string& what) const { fail(DP_ERR_IO, path_ + ": " + what); }

void GzFile::damaged(uint64_t at, const char* zlib_message) const {
  // zlib's message starts with the path: keep only its own words.
  std::string why = zlib_message ? zlib_message : "unknown error";
  if (why.compare(0, path_.size() + 2, path_ + ": ") == 0) why.erase(0, path_.size() + 2);
  corrupt("damaged compressed data near byte " + std::to_string(at) + " of the decompressed content: " + why);
}

size_t GzFile::read(void* dst, size_t n) {
  auto* gz = static_cast<gzFile>(gz_);
  auto* p = static_cast<unsigned char*>(dst);
  size_t done = 0;
  while (done < n) {
    // 1 MiB a call: gzread counts in int, and a damaged stream is then
    // reported within 1 MiB of where it is.
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, size_t(1) << 20));
    int got = gzread(gz, p + done, chunk);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(gz, &code);
      if (code == Z_ERRNO) corrupt("cannot read at byte " + std::to_string(offset_ + done) + ": " + std::strerror(errno));
      damaged(offset_ + done, msg);
    }
    if (got == 0) {
      // The end of the content, or a gzip stream cut short, which zlib
      // reports only through gzerror.
      int code = 0;
      const char* msg = gzerror(gz, &code);
      if (code != Z_OK && code != Z_STREAM_END) damaged(offset_ + done, msg);
      break;
    }
    done += static_cast<size_t>(got);
  }
  offset_ += done;
  return done;
}

void GzFile::read_exact(void* dst, size_t n, const char* what) {
  uint64_t start = offset_;
  size_t got = read(dst, n);
  if (got != n)
    corrupt("truncated at byte " + std::to_string(start + got) + ": expected " + std::to_string(n) + " bytes of " + what +
            " from byte " + std::to_string(start) + ", got " + std::to_string(got));
}

void GzFile::read_exact(std::vector<uint8_t>& out, uint64_t n, const char* what) {
  // Reserved up to 64 MiB (untouched until read into); filled in chunks from
  // 64 KiB, doubling to 64 MiB, so that a header claiming more than the file
  // holds costs about what the file holds.
  constexpr uint64_t kMaxChunk = uint64_t(64) << 20;
  uint64_t chunk = uint64_t(64) << 10;
  uint64_t start = offset_;
  out.clear();
  out.reserve(static_cast<size_t>(std::min(n, kMaxChunk)));
  while (out.size() < n) {
    size_t have = out.size();
    size_t want = static_cast<size_t>(std::min<uint64_t>(n - have, chunk));
    chunk = std::min(chunk * 2, kMaxChunk);
    out.resize(have + want);
    size_t got = read(out.data() + have, want);
    if (got != want)
      corrupt("truncated at byte " + std::to_string(start + have + got) + ": expected " + std::to_string(n) + " bytes of " +
              what + " from byte " + std::to_string(start) + ", got " + std::to_string(have + got));
  }
}

uint32_t GzFile::read_be32(const char* what) {
  unsigned char b[4];
  read_exact(b, 4, what);
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

void GzFile::read_rest(std::vector<uint8_t>& out) {
  // Chunks from 64 KiB, doubling to 16 MiB: a small file (or a damaged one)
  // costs little, a large one few calls.
  constexpr size_t kMaxChunk = size_t(16) << 20;
  size_t chunk = size_t(64) << 10;
  for (;;) {
    size_t have = out.size();
    out.resize(have + chunk);
    size_t got = read(out.data() + have, chunk);
    out.resize(have + got);
    if (got < chunk) return;
    chunk = std::min(chunk * 2, kMaxChunk);
  }
}

void GzFile::expect_end(const char* after_what) {
  unsigned char b;
  uint64_t at = offset_;
  if (read(&b, 1) != 0)
    corrupt("unexpected data at byte " + std::to_string(at) + ", after the " + after_what + " (the header's counts say the file ends there)");
}

}  // namespace dp
