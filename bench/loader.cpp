// Batches/s of dp's loader over a Fashion-MNIST-sized dataset (60000 images
// of 28x28; the real files when present, else a synthetic uncompressed IDX
// pair written to a temporary directory), batch 64, shuffled, with 0, 1 and
// 2 worker threads, plain and with the usual augmentation (random crop with
// padding 2, horizontal flip, normalize). Configurations run side by side in
// interleaved rounds (the machine is shared and noisy); the medians are
// printed as a table and, on the last line, as one JSON object.
//
//   bench/loader [rounds] [batches-per-round]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dp.h"

static void ok(dp_status s, const char* what) {
  if (s != DP_OK) {
    std::fprintf(stderr, "bench: %s: %s\n", what, dp_last_error());
    std::exit(1);
  }
}

static bool exists(const std::string& path) {
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fclose(f);
    return true;
  }
  return false;
}

static void put_be32(FILE* f, uint32_t v) {
  unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                        static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  std::fwrite(b, 1, 4, f);
}

// 60000 images of 28x28 with pseudo-random pixels, labels 0..9.
static void write_synthetic(const std::string& images, const std::string& labels) {
  const uint32_t n = 60000, side = 28;
  FILE* f = std::fopen(images.c_str(), "wb");
  if (!f) std::exit(1);
  put_be32(f, 0x00000803);
  put_be32(f, n);
  put_be32(f, side);
  put_be32(f, side);
  std::vector<unsigned char> px(static_cast<size_t>(n) * side * side);
  uint64_t s = 12345;
  for (auto& p : px) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p = static_cast<unsigned char>(s >> 56);
  }
  std::fwrite(px.data(), 1, px.size(), f);
  std::fclose(f);
  f = std::fopen(labels.c_str(), "wb");
  if (!f) std::exit(1);
  put_be32(f, 0x00000801);
  put_be32(f, n);
  for (uint32_t i = 0; i < n; ++i) std::fputc(static_cast<int>(i % 10), f);
  std::fclose(f);
}

struct Config {
  std::string label;
  bool augmented;
  int workers;
  dp_loader* loader = nullptr;
  std::vector<double> rates;
};

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  int batches = argc > 2 ? std::atoi(argv[2]) : 300;
  const int64_t batch_size = 64;

  std::string dir = "/usr/share/datasets/fashion-mnist/";
  std::string images = dir + "train-images-idx3-ubyte.gz", labels = dir + "train-labels-idx1-ubyte.gz";
  std::string source = "fashion-mnist";
  std::string tmp;
  if (!exists(images) || !exists(labels)) {
    char tmpl[] = "/tmp/dp-bench-loader-XXXXXX";
    if (!mkdtemp(tmpl)) return 1;
    tmp = tmpl;
    images = tmp + "/images-idx3-ubyte";
    labels = tmp + "/labels-idx1-ubyte";
    write_synthetic(images, labels);
    source = "synthetic";
  }

  dp_context* ctx = nullptr;
  ok(dp_context_create(&ctx), "context");
  auto t0 = std::chrono::steady_clock::now();
  dp_dataset *plain = nullptr, *aug = nullptr;
  ok(dp_dataset_from_idx(ctx, images.c_str(), labels.c_str(), &plain), "dataset");
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ok(dp_dataset_from_idx(ctx, images.c_str(), labels.c_str(), &aug), "dataset");
  ok(dp_dataset_set_transform(aug, R"({"random_crop": {"size": 28, "padding": 2}, "horizontal_flip": 0.5,
                                       "normalize": {"mean": [0.2860], "std": [0.3530]}})"),
     "transform");

  std::vector<Config> configs;
  for (bool a : {false, true})
    for (int w : {0, 1, 2}) configs.push_back({std::string(a ? "augmented" : "plain") + ", " + std::to_string(w) + " workers", a, w, nullptr, {}});
  for (Config& c : configs) {
    std::string cfg = "{\"batch_size\": " + std::to_string(batch_size) +
                      ", \"shuffle\": true, \"num_workers\": " + std::to_string(c.workers) + ", \"prefetch\": 2, \"seed\": 1}";
    ok(dp_loader_create(c.augmented ? aug : plain, cfg.c_str(), &c.loader), "loader");
  }
  dp_tensor *x = nullptr, *y = nullptr;
  int64_t one = 1;
  ok(dp_tensor_create(ctx, DP_F32, 1, &one, &x), "tensor");
  ok(dp_tensor_create(ctx, DP_I64, 1, &one, &y), "tensor");

  for (int r = 0; r < rounds; ++r) {
    for (Config& c : configs) {
      int64_t rows = 0;
      auto start = std::chrono::steady_clock::now();
      for (int b = 0; b < batches; ++b) {
        ok(dp_loader_next(c.loader, x, y, &rows), "next");
        if (rows == 0) ok(dp_loader_next(c.loader, x, y, &rows), "next");
      }
      double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      c.rates.push_back(batches / sec);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("Loader over %s (60000 x 1x28x28, loaded in %.2f s), batch %lld, shuffled; %d interleaved rounds of %d batches\n",
              source.c_str(), load_s, static_cast<long long>(batch_size), rounds, batches);
  std::printf("(the caller does nothing with the batches: this is the loader's own rate)\n\n");
  std::printf("%-12s %16s %16s %16s\n", "pipeline", "0 workers", "1 worker", "2 workers");
  for (int a = 0; a < 2; ++a) {
    std::printf("%-12s", a ? "augmented" : "plain");
    for (int w = 0; w < 3; ++w) std::printf(" %11.0f b/s", median(configs[static_cast<size_t>(a * 3 + w)].rates));
    std::printf("\n");
  }
  std::printf("{\"source\": \"%s\", \"batch_size\": %lld, \"plain\": {\"workers_0\": %.1f, \"workers_1\": %.1f, \"workers_2\": %.1f}, "
              "\"augmented\": {\"workers_0\": %.1f, \"workers_1\": %.1f, \"workers_2\": %.1f}}\n",
              source.c_str(), static_cast<long long>(batch_size), median(configs[0].rates), median(configs[1].rates),
              median(configs[2].rates), median(configs[3].rates), median(configs[4].rates), median(configs[5].rates));

  for (Config& c : configs) dp_loader_destroy(c.loader);
  dp_tensor_destroy(x);
  dp_tensor_destroy(y);
  dp_dataset_destroy(plain);
  dp_dataset_destroy(aug);
  dp_context_destroy(ctx);
  if (!tmp.empty()) {
    std::remove(images.c_str());
    std::remove(labels.c_str());
    rmdir(tmp.c_str());
  }
  return 0;
}
