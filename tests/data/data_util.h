// Helpers of the data tests: a temporary directory, small IDX and CIFAR-10
// files (plain or gzip-compressed through zlib), and loader plumbing.
#pragma once
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api_util.h"

struct TmpDir {
  std::string path;
  TmpDir() {
    char tmpl[] = "/tmp/dp-data-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TmpDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

using Bytes = std::vector<unsigned char>;

inline void write_file(const std::string& path, const Bytes& b, bool gz) {
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb1");
    REQUIRE(f != nullptr);
    if (!b.empty()) REQUIRE(gzwrite(f, b.data(), static_cast<unsigned>(b.size())) == static_cast<int>(b.size()));
    REQUIRE(gzclose(f) == Z_OK);
  } else {
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    if (!b.empty()) REQUIRE(std::fwrite(b.data(), 1, b.size(), f) == b.size());
    std::fclose(f);
  }
}

inline void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(v >> s));
}

// Image i's pixel p is (i * 7 + p) % 256; label i is i % 10.
inline unsigned char pixel_of(int64_t i, int64_t p) { return static_cast<unsigned char>((i * 7 + p) % 256); }

inline Bytes idx_images(uint32_t n, uint32_t rows, uint32_t cols) {
  Bytes b;
  put_be32(b, 0x00000803);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t p = 0; p < rows * cols; ++p) b.push_back(pixel_of(i, p));
  return b;
}

inline Bytes idx_labels(uint32_t n) {
  Bytes b;
  put_be32(b, 0x00000801);
  put_be32(b, n);
  for (uint32_t i = 0; i < n; ++i) b.push_back(static_cast<unsigned char>(i % 10));
  return b;
}

inline Bytes cifar_records(int n, int first = 0) {
  Bytes b;
  for (int i = first; i < first + n; ++i) {
    b.push_back(static_cast<unsigned char>(i % 10));
    for (int p = 0; p < 3072; ++p) b.push_back(pixel_of(i, p));
  }
  return b;
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A dp_dataset_callbacks of this dp.h (struct_size set, the rest zero but what is given).
inline dp_dataset_callbacks callbacks(void* user, int64_t length,
                                      int (*get_item)(void*, int64_t, float*, void*, char*, size_t),
                                      void (*release)(void*) = nullptr) {
  dp_dataset_callbacks cb;
  std::memset(&cb, 0, sizeof cb);
  cb.struct_size = sizeof cb;
  cb.user = user;
  cb.length = length;
  cb.get_item = get_item;
  cb.release = release;
  return cb;
}

// A call that must fail with `status` and a message holding every part.
#define CHECK_FAILS(call, status, ...)                                                     \
  do {                                                                                     \
    dp_status s_ = (call);                                                                 \
    std::string m_ = dp_last_error();                                                      \
    INFO(#call << " -> " << std::string(dp_status_name(s_)) << ": " << m_);                \
    CHECK(s_ == (status));                                                                 \
    for (const char* part_ : {__VA_ARGS__}) CHECK_MESSAGE(contains(m_, part_), part_);     \
  } while (0)

// A context and the two batch tensors.
struct Fixture {
  dp_context* ctx = nullptr;
  dp_tensor* x = nullptr;
  dp_tensor* y = nullptr;
  Fixture() {
    DP_REQUIRE_OK(dp_context_create(&ctx));
    int64_t one = 1;
    DP_REQUIRE_OK(dp_tensor_create(ctx, DP_F32, 1, &one, &x));
    DP_REQUIRE_OK(dp_tensor_create(ctx, DP_I64, 1, &one, &y));
  }
  ~Fixture() {
    dp_tensor_destroy(x);
    dp_tensor_destroy(y);
    dp_context_destroy(ctx);
  }
};

// shape_of(tensor) comes from api_util.h.
template <class T>
std::vector<T> contents(const dp_tensor* t) {
  int64_t n = 1;
  for (int64_t d : shape_of(t)) n *= d;
  std::vector<T> v(static_cast<size_t>(n));
  DP_REQUIRE_OK(dp_tensor_copy_to_host(t, v.data(), v.size() * sizeof(T)));
  return v;
}

// A dataset of n samples [2]: input (i, -i), target i.
inline dp_dataset* index_dataset(dp_context* ctx, int64_t n) {
  std::vector<float> in;
  std::vector<int64_t> tg;
  for (int64_t i = 0; i < n; ++i) {
    in.push_back(static_cast<float>(i));
    in.push_back(-static_cast<float>(i));
    tg.push_back(i);
  }
  int64_t shape = 2;
  dp_dataset* ds = nullptr;
  DP_REQUIRE_OK(dp_dataset_from_arrays(ctx, in.data(), 1, &shape, n, DP_I64, tg.data(), 0, nullptr, 0, &ds));
  return ds;
}

// The targets of the next batch (empty at the end of an epoch).
inline std::vector<int64_t> next_targets(dp_loader* l, Fixture& f) {
  int64_t rows = -1;
  DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
  auto v = contents<int64_t>(f.y);
  REQUIRE(static_cast<int64_t>(v.size()) == rows);
  return v;
}

// One epoch's batches of targets (reads through the end-of-epoch call).
inline std::vector<std::vector<int64_t>> epoch_batches(dp_loader* l, Fixture& f) {
  std::vector<std::vector<int64_t>> out;
  for (;;) {
    auto b = next_targets(l, f);
    if (b.empty()) return out;
    out.push_back(b);
  }
}
