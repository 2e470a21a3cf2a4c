#include "io/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include <zlib.h>

#include "core/args.h"
#include "core/error.h"
#include "io/whole_file.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "dp's safetensors I/O copies host floats as little-endian: port it before building on a big-endian host"
#endif

namespace dp::io {

using nlohmann::json;

namespace {

// safetensors' own limit on the header (100 MB): a larger size is corruption.
const uint64_t kMaxHeader = 100000000;

std::string sys_error() { return std::strerror(errno); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Closes a FILE* on every path out.
struct File {
  FILE* f = nullptr;
  ~File() {
    if (f) std::fclose(f);
  }
};

void read_exact(FILE* f, void* dst, size_t n, const std::string& path, const char* what) {
  if (n == 0) return;
  size_t got = std::fread(dst, 1, n, f);
  if (got != n) {
    if (std::ferror(f)) fail(DP_ERR_IO, path + ": cannot read " + what + ": " + sys_error());
    fail(DP_ERR_IO, path + ": truncated while reading " + what + " (the file changed while being read?)");
  }
}

// zlib's crc32 takes an unsigned int length: larger buffers go in pieces.
uint32_t crc32_update(uint32_t crc, const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  while (n > 0) {
    const size_t piece = std::min<size_t>(n, size_t{1} << 30);
    crc = static_cast<uint32_t>(::crc32(crc, b, static_cast<uInt>(piece)));
    b += piece;
    n -= piece;
  }
  return crc;
}

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(v));
  return buf;
}

// What kHeaderCrc32 covers, in a canonical form (io/safetensors.h): each
// tensor in name order as the fields T, name, dtype, shape ("2,3"), begin,
// end; then each metadata key but kHeaderCrc32 in key order as M, key, value;
// every field written as <decimal length>:<bytes>, so that no two headers
// give the same bytes.
using TensorFields = std::map<std::string, std::vector<std::string>>;  // name -> dtype, shape, begin, end

std::string header_crc(const TensorFields& tensors, const std::map<std::string, std::string>& meta) {
  uint32_t crc = 0;
  auto field = [&crc](const std::string& f) {
    const std::string len = std::to_string(f.size()) + ":";
    crc = crc32_update(crc, len.data(), len.size());
    crc = crc32_update(crc, f.data(), f.size());
  };
  for (const auto& t : tensors) {
    field("T");
    field(t.first);
    for (const std::string& f : t.second) field(f);
  }
  for (const auto& m : meta)
    if (m.first != kHeaderCrc32) field("M"), field(m.first), field(m.second);
  return hex32(crc);
}

std::vector<std::string> tensor_fields(const std::string& dtype, const std::vector<int64_t>& shape, uint64_t begin,
                                       uint64_t end) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? "," : "") + std::to_string(shape[i]);
  return {dtype, dims, std::to_string(begin), std::to_string(end)};
}

uint64_t get_uint(const json& v, const std::string& where) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  fail(DP_ERR_IO, where + " must be a non-negative integer, got " + json_brief(v));
}

// One header entry, checked on its own: known dtype, valid shape, offsets
// whose span is exactly the tensor's byte count.
StEntry parse_entry(const std::string& path, const std::string& name, const json& v) {
  std::string where = path + ": tensor '" + name + "'";
  if (!v.is_object()) fail(DP_ERR_IO, where + ": expected an object with dtype, shape and data_offsets, got " + json_brief(v));
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
      fail(DP_ERR_IO, where + ": unknown field '" + it.key() + "' (expected dtype, shape, data_offsets)");
  StEntry e;
  e.name = name;
  if (!v.contains("dtype") || !v["dtype"].is_string()) fail(DP_ERR_IO, where + ": missing or non-string dtype");
  e.dtype = v["dtype"].get<std::string>();
  size_t esize = st_dtype_size(e.dtype);
  if (!esize) fail(DP_ERR_IO, where + ": unknown dtype '" + e.dtype + "'");
  if (!v.contains("shape") || !v["shape"].is_array()) fail(DP_ERR_IO, where + ": missing shape (a list of sizes)");
  uint64_t numel = 1;
  for (const json& d : v["shape"]) {
    uint64_t n = get_uint(d, where + ": shape entries");
    if (n > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, n, &numel))
      fail(DP_ERR_IO, where + ": shape " + json_brief(v["shape"]) + " is too large");
    e.shape.push_back(static_cast<int64_t>(n));
  }
  const json* off = v.contains("data_offsets") ? &v["data_offsets"] : nullptr;
  if (!off || !off->is_array() || off->size() != 2)
    fail(DP_ERR_IO, where + ": data_offsets must be a list [begin, end]");
  e.begin = get_uint((*off)[0], where + ": data_offsets");
  e.end = get_uint((*off)[1], where + ": data_offsets");
  if (e.end < e.begin)
    fail(DP_ERR_IO, where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] end before they begin");
  uint64_t bytes = 0;
  bool overflow = __builtin_mul_overflow(numel, static_cast<uint64_t>(esize), &bytes);
  if (overflow || bytes != e.end - e.begin)
    fail(DP_ERR_IO, where + ": dtype " + e.dtype + " and shape " + shape_str(e.shape) + " make " +
                        (overflow ? std::string("too many") : std::to_string(bytes)) +
                        " bytes, but data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] span " +
                        std::to_string(e.end - e.begin));
  return e;
}

}  // namespace

size_t st_dtype_size(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},     {"I64", 8},
      {"U64", 8},  {"F64", 8}, {"C64", 8}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

const StEntry* StFile::find(const std::string& name) const {
  for (const StEntry& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

StFile read_safetensors(const std::string& path, bool with_data) {
  StFile out;
  out.path = path;
  File file;
  file.f = std::fopen(path.c_str(), "rb");
  if (!file.f) fail(DP_ERR_IO, path + ": cannot open: " + sys_error());
  struct stat st;
  if (fstat(fileno(file.f), &st) != 0) fail(DP_ERR_IO, path + ": cannot stat: " + sys_error());
  if (!S_ISREG(st.st_mode)) fail(DP_ERR_IO, path + ": not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8)
    fail(DP_ERR_IO, path + ": truncated: " + std::to_string(file_size) + " bytes, too short for the 8-byte header size");

  unsigned char size_bytes[8];
  read_exact(file.f, size_bytes, 8, path, "the header size");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | size_bytes[i];
  if (n > file_size - 8)
    fail(DP_ERR_IO, path + ": truncated or not a safetensors file: the header size says " + std::to_string(n) +
                        " bytes, the file has " + std::to_string(file_size - 8) + " after the size");
  if (n > kMaxHeader)
    fail(DP_ERR_IO, path + ": header of " + std::to_string(n) + " bytes exceeds the format's limit of " +
                        std::to_string(kMaxHeader));
  if (n < 2) fail(DP_ERR_IO, path + ": header of " + std::to_string(n) + " bytes cannot hold a JSON object");
  std::string text(static_cast<size_t>(n), '\0');
  read_exact(file.f, &text[0], text.size(), path, "the header");
  if (text[0] != '{') fail(DP_ERR_IO, path + ": the header is not a JSON object (not a safetensors file?)");

  // Duplicate names would silently shadow each other: find them while parsing.
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second) duplicate = k;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, cb);
  } catch (const json::exception& e) {
    fail(DP_ERR_IO, path + ": the header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) fail(DP_ERR_IO, path + ": the header is not a JSON object");
  if (!duplicate.empty()) fail(DP_ERR_IO, path + ": the header names '" + duplicate + "' twice");

  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) fail(DP_ERR_IO, path + ": __metadata__ must be an object of strings");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string())
          fail(DP_ERR_IO, path + ": __metadata__ value of '" + m.key() + "' must be a string, got " + json_brief(m.value()));
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    out.entries.push_back(parse_entry(path, it.key(), it.value()));
  }

  // The data buffer: covered exactly by the tensors, in some order.
  std::sort(out.entries.begin(), out.entries.end(), [](const StEntry& a, const StEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 0; i < out.entries.size(); ++i) out.by_name[out.entries[i].name] = i;
  const uint64_t data_size = file_size - 8 - n;
  uint64_t at = 0;
  bool gap = false;
  const StEntry* prev = nullptr;
  for (const StEntry& e : out.entries) {
    if (e.begin < at)
      fail(DP_ERR_IO, path + ": tensors '" + prev->name + "' [" + std::to_string(prev->begin) + ", " + std::to_string(prev->end) +
                          ") and '" + e.name + "' [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") overlap");
    if (e.begin > at) gap = true;
    at = e.end;
    prev = &e;
  }
  if (at > data_size) {
    if (!gap)
      fail(DP_ERR_IO, path + ": truncated: header says " + std::to_string(at) + " bytes of tensor data, file has " +
                          std::to_string(data_size));
    for (const StEntry& e : out.entries)
      if (e.end > data_size)
        fail(DP_ERR_IO, path + ": tensor '" + e.name + "': data_offsets [" + std::to_string(e.begin) + ", " +
                            std::to_string(e.end) + "] are outside the data buffer (" + std::to_string(data_size) + " bytes)");
  }
  at = 0;
  for (const StEntry& e : out.entries) {
    if (e.begin > at)
      fail(DP_ERR_IO, path + ": bytes [" + std::to_string(at) + ", " + std::to_string(e.begin) + ") before tensor '" + e.name +
                          "' belong to no tensor (the format allows no gaps)");
    at = e.end;
  }
  if (at < data_size)
    fail(DP_ERR_IO, path + ": " + std::to_string(data_size - at) + " bytes after the last tensor belong to no tensor (header says " +
                        std::to_string(at) + " bytes of tensor data, file has " + std::to_string(data_size) + ")");

  auto hcrc = out.metadata.find(kHeaderCrc32);
  if (hcrc != out.metadata.end()) {
    TensorFields tensors;
    for (const StEntry& e : out.entries) tensors[e.name] = tensor_fields(e.dtype, e.shape, e.begin, e.end);
    const std::string got = header_crc(tensors, out.metadata);
    if (got != hcrc->second)
      fail(DP_ERR_IO, path + ": the header is corrupted (its tensors or __metadata__ changed since it was written): its "
                             "CRC-32 is " + got + ", __metadata__ '" + kHeaderCrc32 + "' says '" + hcrc->second + "'");
  }

  if (with_data) {
    out.data.resize(static_cast<size_t>(data_size));
    read_exact(file.f, out.data.data(), out.data.size(), path, "the tensor data");
    auto crc = out.metadata.find(kDataCrc32);
    if (crc != out.metadata.end()) {
      const std::string& want = crc->second;
      if (want.size() != 8 || !std::all_of(want.begin(), want.end(), [](char c) {
            return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
          }))
        fail(DP_ERR_IO, path + ": __metadata__ '" + kDataCrc32 + "' must be 8 lowercase hex digits, got '" + want + "'");
      const std::string got = hex32(crc32_update(0, out.data.data(), out.data.size()));
      if (got != want)
        fail(DP_ERR_IO, path + ": the tensor data is corrupted: its CRC-32 is " + got + ", __metadata__ '" + kDataCrc32 +
                            "' says " + want);
    }
  }
  return out;
}

const char* const kDataCrc32 = "data_crc32";
const char* const kHeaderCrc32 = "header_crc32";

std::string st_header_crc32(const std::vector<StOut>& tensors, const std::vector<std::pair<std::string, std::string>>& metadata) {
  TensorFields t;
  std::map<std::string, std::string> m;
  uint64_t at = 0;  // the offsets st_header gives: back to back, in this order
  for (const StOut& o : tensors) {
    const uint64_t end = at + st_nbytes(o);
    t[o.name] = tensor_fields(o.dtype, o.shape, at, end);
    at = end;
  }
  for (const auto& kv : metadata) m[kv.first] = kv.second;
  return header_crc(t, m);
}

std::string st_data_crc32(const std::vector<StOut>& tensors) {
  uint32_t crc = 0;
  for (const StOut& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    crc = crc32_update(crc, t.data, static_cast<size_t>(numel * st_dtype_size(t.dtype)));
  }
  return hex32(crc);
}

uint64_t st_nbytes(const StOut& t) {
  const size_t esize = st_dtype_size(t.dtype);
  if (!esize) fail(DP_ERR_INTERNAL, "unknown safetensors dtype '" + t.dtype + "'");
  uint64_t numel = 1;
  for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
  return numel * esize;
}

std::string st_header(const std::vector<StOut>& tensors, const std::vector<std::pair<std::string, std::string>>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& kv : metadata) {
      if (m.contains(kv.first)) fail(DP_ERR_INVALID_ARGUMENT, "metadata key '" + kv.first + "' given twice");
      m[kv.first] = kv.second;
    }
    h["__metadata__"] = std::move(m);
  }
  uint64_t at = 0;
  for (const StOut& t : tensors) {
    if (t.name == "__metadata__") fail(DP_ERR_INVALID_ARGUMENT, "a tensor cannot be named __metadata__");
    if (h.contains(t.name)) fail(DP_ERR_INVALID_ARGUMENT, "two tensors are named '" + t.name + "'");
    uint64_t end = at + st_nbytes(t);
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, end}}};
    at = end;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

void write_safetensors(const std::string& path, const std::vector<StOut>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata) {
  const std::string head = st_header(tensors, metadata);
  std::vector<Piece> pieces{{head.data(), head.size()}};
  for (const StOut& t : tensors) pieces.push_back({t.data, static_cast<size_t>(st_nbytes(t))});
  write_whole_file(path, pieces);
}

}  // namespace dp::io
