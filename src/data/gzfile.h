// Reads a data file through zlib, which decompresses gzip files and passes
// any other file through unchanged, so "train-images-idx3-ubyte" and
// "train-images-idx3-ubyte.gz" read alike. Tracks the offset in the
// (decompressed) content so that every error can say where the file is wrong:
//   t10k-images-idx3-ubyte.gz: truncated at byte 16: expected 7840000 bytes of pixels, got 0
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dp {

class GzFile {
 public:
  // Throws DP_ERR_IO when the file cannot be opened.
  explicit GzFile(std::string path);
  ~GzFile();
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Up to n bytes; fewer only at the end of the content. Throws DP_ERR_IO on
  // a read or decompression error (a damaged gzip stream).
  size_t read(void* dst, size_t n);
  // Exactly n bytes of `what` (for the message), or DP_ERR_IO "truncated".
  void read_exact(void* dst, size_t n, const char* what);
  // A big-endian 32-bit word (IDX headers).
  uint32_t read_be32(const char* what);
  // Exactly n bytes into out (resized to n), read in chunks so that a
  // corrupt header claiming terabytes fails at the end of the data rather
  // than in the allocator.
  void read_exact(std::vector<uint8_t>& out, uint64_t n, const char* what);
  // The rest of the content, appended to out (grown as it arrives, so a
  // header that claims absurd sizes cannot make us allocate them).
  void read_rest(std::vector<uint8_t>& out);
  // Throws DP_ERR_IO unless the content ends here.
  void expect_end(const char* after_what);

  uint64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }
  // DP_ERR_IO "<path>: <what>".
  [[noreturn]] void corrupt(const std::string& what) const;

 private:
  // A decompression error at (about) decompressed byte `at`: zlib reads
  // ahead, so the offset is where our read began, not the damaged byte.
  [[noreturn]] void damaged(uint64_t at, const char* zlib_message) const;


  std::string path_;
  void* gz_ = nullptr;  // gzFile, kept out of this header
  uint64_t offset_ = 0;
};

}  // namespace dp
