// --data: which datasets a spec names, with the transforms each one wants.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <vector>

#include "cli.h"

namespace dpcli {

// DIR/PREFIX-images-idx3-ubyte.gz, or without .gz when only that is there
// (the reader takes IDX files compressed or not).
static std::string idx_file(const std::string& dir, const std::string& name) {
  const std::string gz = dir + "/" + name + ".gz", plain = dir + "/" + name;
  return ::access(gz.c_str(), F_OK) != 0 && ::access(plain.c_str(), F_OK) == 0 ? plain : gz;
}

static Dataset idx(dp_context* ctx, const std::string& dir, const std::string& prefix) {
  dp_dataset* ds = nullptr;
  std::string images = idx_file(dir, prefix + "-images-idx3-ubyte"), labels = idx_file(dir, prefix + "-labels-idx1-ubyte");
  check(dp_dataset_from_idx(ctx, images.c_str(), labels.c_str(), &ds), "--data");
  return Dataset(ds);
}

static Dataset cifar(dp_context* ctx, const std::vector<std::string>& files) {
  std::vector<const char*> paths;
  for (const auto& f : files) paths.push_back(f.c_str());
  dp_dataset* ds = nullptr;
  check(dp_dataset_from_cifar10(ctx, paths.data(), static_cast<int>(paths.size()), &ds), "--data");
  return Dataset(ds);
}

static std::string gigabytes(double bytes) {
  char s[48];
  std::snprintf(s, sizeof s, "%.1f GB", bytes / 1e9);
  return s;
}

// n samples shaped as the model's input, labelled by the arg-max of a fixed
// random projection: learnable, so a run on it can show the loss falling.
static Dataset synthetic(dp_context* ctx, const dp_model* model, int64_t n, uint64_t seed, uint64_t sample_stream,
                         const std::string& option) {
  int nd = 0, od = 0;
  int64_t in[DP_MAX_DIMS], out[DP_MAX_DIMS];
  check(dp_model_input_shape(model, &nd, in), "model");
  check(dp_model_output_shape(model, &od, out), "model");
  if (od != 1) throw Failure(kUsage, option + " synthetic: needs a model whose output is [classes] per sample");
  int64_t per = 1, classes = out[0];
  for (int i = 0; i < nd; ++i) per *= in[i];  // at most 2^59: dp checked the model
  // The samples (per floats and an int64 label each) are made here, before
  // dp sees them: checked against the machine's memory, not left to bad_alloc.
  const double bytes = 4.0 * double(n) * double(per + 2), machine = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (bytes > machine * 0.9)
    throw Failure(kRuntime, option + ": " + std::to_string(n) + " synthetic samples of " + std::to_string(per) + " floats take " +
                                gigabytes(bytes) + ", more than this machine's memory (" + gigabytes(machine) + ")");
  std::vector<float> x(static_cast<size_t>(n * per)), proj(static_cast<size_t>(per * classes));
  std::vector<int64_t> y(static_cast<size_t>(n));
  uint64_t s = seed * 2862933555777941757ull + 3037000493ull;
  auto uniform = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(s >> 40) / 16777216.0f * 2 - 1;
  };
  for (float& v : proj) v = uniform();
  s ^= sample_stream * 0x9E3779B97F4A7C15ull;  // the samples' own stream
  for (int64_t i = 0; i < n; ++i) {
    float* xi = x.data() + i * per;
    for (int64_t j = 0; j < per; ++j) xi[j] = uniform();
    int64_t best = 0;
    double best_v = -INFINITY;
    for (int64_t c = 0; c < classes; ++c) {
      double v = 0;
      for (int64_t j = 0; j < per; ++j) v += xi[j] * proj[j * classes + c];
      if (v > best_v) best_v = v, best = c;
    }
    y[i] = best;
  }
  dp_dataset* ds = nullptr;
  check(dp_dataset_from_arrays(ctx, x.data(), nd, in, n, DP_I64, y.data(), 0, nullptr, /*borrow=*/0, &ds), "--data");
  return Dataset(ds);
}

Data open_data(dp_context* ctx, const std::string& spec, const dp_model* model, uint64_t seed, const std::string& option) {
  Data d;
  size_t colon = spec.find(':');
  std::string kind = spec.substr(0, colon), arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  d.name = kind;
  if (kind == "fashion-mnist" || kind == "mnist") {
    if (arg.empty()) {
      if (kind == "mnist") throw Failure(kUsage, "--data mnist:DIR needs the folder of the IDX files");
      arg = "/usr/share/datasets/fashion-mnist";
    }
    d.train = idx(ctx, arg, "train");
    d.test = idx(ctx, arg, "t10k");
    // Per-pixel mean and std of the training set, as torchvision examples use.
    d.pixels = "uint8 / 255 (torchvision's ToTensor)";
    d.train_transform = d.test_transform = kind == "mnist" ? R"({"normalize": {"mean": [0.1307], "std": [0.3081]}})"
                                                           : R"({"normalize": {"mean": [0.2860], "std": [0.3530]}})";
  } else if (kind == "cifar10") {
    if (arg.empty()) throw Failure(kUsage, "--data cifar10:DIR needs the folder of data_batch_1.bin ... test_batch.bin");
    std::vector<std::string> train;
    for (int i = 1; i <= 5; ++i) train.push_back(arg + "/data_batch_" + std::to_string(i) + ".bin");
    d.train = cifar(ctx, train);
    d.test = cifar(ctx, {arg + "/test_batch.bin"});
    const std::string norm = R"("normalize": {"mean": [0.4914, 0.4822, 0.4465], "std": [0.2470, 0.2435, 0.2616]})";
    d.pixels = "uint8 / 255 (torchvision's ToTensor)";
    d.train_transform = R"({"random_crop": {"size": 32, "padding": 4}, "horizontal_flip": 0.5, )" + norm + "}";
    d.test_transform = "{" + norm + "}";
  } else if (kind == "synthetic") {
    char* end = nullptr;
    errno = 0;
    long long n = std::strtoll(arg.c_str(), &end, 10);
    if (arg.empty() || *end || errno == ERANGE || n < 2)
      throw Failure(kUsage, "--data synthetic:N needs a sample count N in [2, 2^63 - 1], got '" + arg + "'");
    d.train = synthetic(ctx, model, n, seed, 1, option);
    d.test = synthetic(ctx, model, std::max<long long>(n / 5, 1), seed, 2, option);  // same projection, other samples
    d.pixels = "uniform floats in [-1, 1)";
  } else {
    throw Failure(kUsage, "--data '" + spec + "': expected fashion-mnist[:DIR], mnist:DIR, cifar10:DIR or synthetic:N");
  }
  check(dp_dataset_set_transform(d.train.get(), d.train_transform.c_str()), "transform");
  check(dp_dataset_set_transform(d.test.get(), d.test_transform.c_str()), "transform");
  return d;
}

}  // namespace dpcli
