// The safetensors format (https://github.com/huggingface/safetensors): an
// 8-byte little-endian header size N, N bytes of JSON header (padded with
// spaces to a multiple of 8), then the data buffer. The header maps each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// into the data buffer, which the tensors cover exactly: no gap, no overlap)
// and "__metadata__" to an object of strings. Data is little-endian,
// row-major.
//
// Reading validates all of it and throws dp::Error(DP_ERR_IO) with a message
// that starts with the file's path and says what is wrong. Writing is atomic:
// a temporary file next to the target, fsynced, renamed over it.
//
// A checksum of the data buffer (dp's checkpoints write one): __metadata__
// "data_crc32", zlib's CRC-32 of the whole data buffer as 8 lowercase hex
// digits. Reading the data verifies it when the file has it; files without it
// (PyTorch's, older checkpoints) read as before. And one of the header:
// "header_crc32", zlib's CRC-32 over, for each tensor in name order, the
// fields T, name, dtype, shape (dims joined by ','), begin, end (decimal),
// then for each other __metadata__ key in key order, M, key, value; each
// field written as <decimal byte length>:<bytes> (st_header_crc32). Verified
// by every read (header only too) when the file has it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dp::io {

struct StEntry {
  std::string name;
  std::string dtype;  // "F32", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data buffer
};

struct StFile {
  std::string path;
  std::vector<StEntry> entries;  // sorted by data offset
  std::map<std::string, size_t> by_name;  // index into entries
  std::map<std::string, std::string> metadata;
  std::vector<unsigned char> data;  // empty when read without data

  const StEntry* find(const std::string& name) const;
  const unsigned char* bytes(const StEntry& e) const { return data.data() + e.begin; }
};

// Bytes per element of a safetensors dtype; 0 when the dtype is unknown.
size_t st_dtype_size(const std::string& dtype);

// Reads and validates a file. With with_data false only the header is read
// (the sizes are still checked against the file's size).
StFile read_safetensors(const std::string& path, bool with_data = true);

struct StOut {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // shape's element count * dtype size bytes, little-endian
};

extern const char* const kDataCrc32;  // "data_crc32"

// The value of kDataCrc32 for a file of these tensors (in this order).
std::string st_data_crc32(const std::vector<StOut>& tensors);

extern const char* const kHeaderCrc32;  // "header_crc32"

// The value of kHeaderCrc32 for a file of these tensors and metadata (the
// metadata's own kHeaderCrc32, if any, left out).
std::string st_header_crc32(const std::vector<StOut>& tensors, const std::vector<std::pair<std::string, std::string>>& metadata);

// The bytes of tensor t's data: its shape's element count times its dtype's size.
uint64_t st_nbytes(const StOut& t);

// The file's first bytes: the 8-byte size and the padded JSON header, with
// offsets for the tensors in the order given. Throws DP_ERR_INVALID_ARGUMENT
// on a duplicate or reserved name.
std::string st_header(const std::vector<StOut>& tensors, const std::vector<std::pair<std::string, std::string>>& metadata);

// Writes path.tmp-<pid>, fsyncs it, renames it over path and fsyncs the
// directory; on any failure removes the temporary file and throws
// DP_ERR_IO with the system's reason. path is untouched unless the rename
// happened.
void write_safetensors(const std::string& path, const std::vector<StOut>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace dp::io
