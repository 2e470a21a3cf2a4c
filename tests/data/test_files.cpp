// IDX and CIFAR-10 files: what loads, and every way a file can be wrong,
// each DP_ERR_IO with a message that names the file and the byte offset.
#include <cmath>

#include "data_util.h"

namespace {

// All samples of a dataset, in order, as (inputs, targets).
struct All {
  std::vector<float> x;
  std::vector<int64_t> y;
  std::vector<int64_t> shape;
};

All read_all(dp_dataset* ds, Fixture& f) {
  int64_t n = 0;
  DP_REQUIRE_OK(dp_dataset_length(ds, &n));
  dp_loader* l = nullptr;
  std::string cfg = R"({"batch_size": )" + std::to_string(n) + "}";
  DP_REQUIRE_OK(dp_loader_create(ds, cfg.c_str(), &l));
  int64_t rows = 0;
  DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
  REQUIRE(rows == n);
  All a{contents<float>(f.x), contents<int64_t>(f.y), shape_of(f.x)};
  dp_loader_destroy(l);
  return a;
}

dp_status open_idx(Fixture& f, const std::string& images, const std::string& labels) {
  dp_dataset* ds = reinterpret_cast<dp_dataset*>(0x1);  // must stay untouched on failure
  dp_status s = dp_dataset_from_idx(f.ctx, images.c_str(), labels.c_str(), &ds);
  if (s == DP_OK) {
    dp_dataset_destroy(ds);
  } else {
    CHECK(ds == reinterpret_cast<dp_dataset*>(0x1));
  }
  return s;
}

}  // namespace

TEST_CASE("IDX: plain and gzip files load, pixels scaled to [0, 1] as x / 255") {
  TmpDir dir;
  Fixture f;
  for (bool gz : {false, true}) {
    CAPTURE(gz);
    std::string im = dir / (gz ? "im.gz" : "im"), lb = dir / (gz ? "lb.gz" : "lb");
    write_file(im, idx_images(50, 3, 4), gz);
    write_file(lb, idx_labels(50), gz);
    dp_dataset* ds = nullptr;
    DP_REQUIRE_OK(dp_dataset_from_idx(f.ctx, im.c_str(), lb.c_str(), &ds));
    int64_t n = 0;
    DP_REQUIRE_OK(dp_dataset_length(ds, &n));
    CHECK(n == 50);
    int nd = 0;
    int64_t s[DP_MAX_DIMS];
    DP_REQUIRE_OK(dp_dataset_sample_shape(ds, &nd, s));
    REQUIRE(nd == 3);
    CHECK(s[0] == 1);
    CHECK(s[1] == 3);
    CHECK(s[2] == 4);
    All a = read_all(ds, f);
    CHECK(a.shape == std::vector<int64_t>{50, 1, 3, 4});
    bool exact = true;
    for (int64_t i = 0; i < 50; ++i) {
      CHECK(a.y[i] == i % 10);
      for (int64_t p = 0; p < 12; ++p) exact = exact && a.x[i * 12 + p] == static_cast<float>(pixel_of(i, p)) / 255.0f;
    }
    CHECK(exact);
    // 0 and 255 occur: the ends of [0, 1] exactly.
    float lo = 1, hi = 0;
    for (float v : a.x) lo = std::fmin(lo, v), hi = std::fmax(hi, v);
    CHECK(lo == 0.0f);
    CHECK(hi == 1.0f);
    dp_dataset_destroy(ds);
  }
}

TEST_CASE("IDX: every corrupt file is DP_ERR_IO naming the file and the offset") {
  TmpDir dir;
  Fixture f;
  const std::string im = dir / "images.gz", lb = dir / "labels.gz";
  write_file(im, idx_images(20, 4, 5), true);
  write_file(lb, idx_labels(20), true);
  REQUIRE(open_idx(f, im, lb) == DP_OK);
  const std::string bad = dir / "bad-images-idx3-ubyte.gz";

  SUBCASE("missing file") {
    std::string missing = dir / "nope-idx3-ubyte.gz";
    CHECK_FAILS(open_idx(f, missing, lb), DP_ERR_IO, "nope-idx3-ubyte.gz", "No such file");
    CHECK_FAILS(open_idx(f, im, missing), DP_ERR_IO, "nope-idx3-ubyte.gz");
  }
  SUBCASE("bad magic") {
    Bytes b = idx_images(20, 4, 5);
    b[3] = 0x02;
    write_file(bad, b, true);
    CHECK_FAILS(open_idx(f, bad, lb), DP_ERR_IO, "bad-images-idx3-ubyte.gz", "bad magic 0x00000802 at byte 0",
                "expected 0x00000803 (IDX images)");
  }
  SUBCASE("images and labels swapped") {
    CHECK_FAILS(open_idx(f, lb, im), DP_ERR_IO, "labels.gz: bad magic 0x00000801 at byte 0");
  }
  SUBCASE("truncated header") {
    Bytes b = idx_images(20, 4, 5);
    b.resize(10);
    write_file(bad, b, true);
    CHECK_FAILS(open_idx(f, bad, lb), DP_ERR_IO, "bad-images-idx3-ubyte.gz", "truncated at byte 10", "row count");
  }
  SUBCASE("truncated pixels, compressed or not") {
    for (bool gz : {true, false}) {
      Bytes b = idx_images(20, 4, 5);
      b.resize(b.size() - 7);  // 16 + 400 - 7 = 409
      write_file(bad, b, gz);
      CHECK_FAILS(open_idx(f, bad, lb), DP_ERR_IO, "bad-images-idx3-ubyte.gz", "truncated at byte 409",
                  "expected 400 bytes of pixels from byte 16, got 393");
    }
  }
  SUBCASE("truncated labels") {
    Bytes b = idx_labels(20);
    b.resize(b.size() - 1);
    std::string badl = dir / "bad-labels.gz";
    write_file(badl, b, true);
    CHECK_FAILS(open_idx(f, im, badl), DP_ERR_IO, "bad-labels.gz", "truncated at byte 27", "labels");
  }
  SUBCASE("label count does not match the image count") {
    std::string badl = dir / "bad-labels.gz";
    write_file(badl, idx_labels(19), true);
    CHECK_FAILS(open_idx(f, im, badl), DP_ERR_IO, "bad-labels.gz", "label count 19 at byte 4", "image count 20",
                "images.gz");
  }
  SUBCASE("data after the end the header announces") {
    Bytes b = idx_images(20, 4, 5);
    b.push_back(1);
    write_file(bad, b, false);
    CHECK_FAILS(open_idx(f, bad, lb), DP_ERR_IO, "bad-images-idx3-ubyte.gz", "unexpected data at byte 416");
  }
  SUBCASE("a zero image side") {
    write_file(bad, idx_images(20, 0, 5), false);
    CHECK_FAILS(open_idx(f, bad, lb), DP_ERR_IO, "bad-images-idx3-ubyte.gz", "row count 0 at byte 8");
  }
  SUBCASE("not gzip, not IDX: garbage") {
    Bytes b;
    for (char c : std::string("<html>this is not a dataset</html>")) b.push_back(static_cast<unsigned char>(c));
    write_file(bad, b, false);
    CHECK_FAILS(open_idx(f, bad, lb), DP_ERR_IO, "bad-images-idx3-ubyte.gz", "bad magic 0x3c68746d at byte 0");
  }
  SUBCASE("a damaged gzip stream") {
    // Compress, then cut the compressed file in the middle.
    write_file(bad, idx_images(200, 28, 28), true);
    FILE* fp = std::fopen(bad.c_str(), "rb");
    Bytes z(1 << 20);
    z.resize(std::fread(z.data(), 1, z.size(), fp));
    std::fclose(fp);
    z.resize(z.size() / 2);
    write_file(bad, z, false);
    CHECK_FAILS(open_idx(f, bad, lb), DP_ERR_IO, "bad-images-idx3-ubyte.gz", "at byte");
  }
  SUBCASE("an empty file") {
    write_file(bad, {}, false);
    CHECK_FAILS(open_idx(f, bad, lb), DP_ERR_IO, "bad-images-idx3-ubyte.gz", "truncated at byte 0");
  }
}

TEST_CASE("CIFAR-10: several batches form one dataset") {
  TmpDir dir;
  Fixture f;
  std::string a = dir / "data_batch_1.bin", b = dir / "data_batch_2.bin.gz";
  write_file(a, cifar_records(3, 0), false);
  write_file(b, cifar_records(2, 3), true);
  const char* paths[] = {a.c_str(), b.c_str()};
  dp_dataset* ds = nullptr;
  DP_REQUIRE_OK(dp_dataset_from_cifar10(f.ctx, paths, 2, &ds));
  All all = read_all(ds, f);
  CHECK(all.shape == std::vector<int64_t>{5, 3, 32, 32});
  bool exact = true;
  for (int i = 0; i < 5; ++i) {
    CHECK(all.y[i] == i % 10);
    for (int p = 0; p < 3072; ++p) exact = exact && all.x[i * 3072 + p] == static_cast<float>(pixel_of(i, p)) / 255.0f;
  }
  CHECK(exact);
  dp_dataset_destroy(ds);
}

TEST_CASE("CIFAR-10: corrupt files") {
  TmpDir dir;
  Fixture f;
  std::string good = dir / "data_batch_1.bin", bad = dir / "data_batch_2.bin";
  write_file(good, cifar_records(2), false);
  auto open = [&](const std::string& second) {
    const char* paths[] = {good.c_str(), second.c_str()};
    dp_dataset* ds = reinterpret_cast<dp_dataset*>(0x1);
    dp_status s = dp_dataset_from_cifar10(f.ctx, paths, 2, &ds);
    if (s == DP_OK) dp_dataset_destroy(ds);
    else CHECK(ds == reinterpret_cast<dp_dataset*>(0x1));
    return s;
  };
  SUBCASE("size not a multiple of 3073") {
    Bytes b = cifar_records(3);
    b.resize(b.size() - 100);
    write_file(bad, b, false);
    CHECK_FAILS(open(bad), DP_ERR_IO, "data_batch_2.bin", "not a multiple of 3073", "record at byte 6146");
  }
  SUBCASE("a label above 9") {
    Bytes b = cifar_records(3);
    b[3073] = 12;
    write_file(bad, b, true);
    CHECK_FAILS(open(bad), DP_ERR_IO, "data_batch_2.bin", "bad label 12 at byte 3073");
  }
  SUBCASE("missing file") {
    CHECK_FAILS(open(dir / "data_batch_9.bin"), DP_ERR_IO, "data_batch_9.bin");
  }
  SUBCASE("empty file") {
    write_file(bad, {}, false);
    CHECK_FAILS(open(bad), DP_ERR_IO, "data_batch_2.bin", "empty file at byte 0");
  }
  SUBCASE("no files") {
    dp_dataset* ds = nullptr;
    const char* none[] = {nullptr};
    CHECK(dp_dataset_from_cifar10(f.ctx, none, 0, &ds) == DP_ERR_INVALID_ARGUMENT);
    CHECK(dp_dataset_from_cifar10(f.ctx, none, 1, &ds) == DP_ERR_INVALID_ARGUMENT);
    CHECK(ds == nullptr);
  }
}

TEST_CASE("Fashion-MNIST, when the real files are present") {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  std::string im = dir + "train-images-idx3-ubyte.gz", lb = dir + "train-labels-idx1-ubyte.gz";
  if (FILE* fp = std::fopen(im.c_str(), "rb")) {
    std::fclose(fp);
  } else {
    MESSAGE("skipped: " << im << " is not present");
    return;
  }
  Fixture f;
  dp_dataset* ds = nullptr;
  DP_REQUIRE_OK(dp_dataset_from_idx(f.ctx, im.c_str(), lb.c_str(), &ds));
  int64_t n = 0;
  DP_REQUIRE_OK(dp_dataset_length(ds, &n));
  CHECK(n == 60000);
  dp_loader* l = nullptr;
  DP_REQUIRE_OK(dp_loader_create(ds, R"({"batch_size": 10})", &l));
  int64_t rows = 0;
  DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
  CHECK(rows == 10);
  CHECK(shape_of(f.x) == std::vector<int64_t>{10, 1, 28, 28});
  CHECK(contents<int64_t>(f.y) == std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5});
  auto x = contents<float>(f.x);
  double sum0 = 0;
  for (int p = 0; p < 784; ++p) sum0 += x[p] * 255.0;
  CHECK(std::lround(sum0) == 76247);  // the first image's byte sum
  dp_loader_destroy(l);
  dp_dataset_destroy(ds);
}
