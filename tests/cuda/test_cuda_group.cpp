// Whole models on CUDA groups through the C ABI, against CPU groups of the
// same size (batch norm normalises per replica, so "cuda:0,cuda:0" is held to
// "cpu:0,cpu:1"): training with SGD momentum and with Adam, per-step losses,
// the split, evaluation, forward + backward gradients; the errors a CUDA group
// must report (and stay usable after); a checkpoint round trip on cuda:0; and
// no cudaMalloc / cudaFree in steady-state training.
//
// Exits 77 (skipped) when dp_device_count("cuda") is 0, printing why.
// Progress goes to stdout, so a crash names its case.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "api_util.h"
#include "cuda_malloc_counter.h"

namespace {

// An MLP with batch_norm1d and dropout. Layers before batch norm have no bias:
// its gradient would be 0 up to rounding, and Adam turns rounding noise into
// steps of size lr, which no two devices reproduce.
const char* kMlp = R"({
  "seed": 5, "input": {"shape": [12]},
  "layers": [
    {"type": "linear", "out_features": 32, "bias": false},
    {"type": "batch_norm1d"},
    {"type": "relu"},
    {"type": "dropout", "p": 0.2},
    {"type": "linear", "out_features": 16},
    {"type": "tanh"},
    {"type": "linear", "out_features": 5}
  ],
  "loss": {"type": "cross_entropy"}})";

// A small CNN: conv / batch_norm2d / relu, a residual add, max pooling,
// global average pooling, a linear head.
const char* kCnn = R"({
  "seed": 9, "input": {"shape": [3, 8, 8]},
  "layers": [
    {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false, "name": "c1"},
    {"type": "batch_norm2d", "name": "b1"},
    {"type": "relu", "name": "r1"},
    {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false, "name": "c2"},
    {"type": "batch_norm2d", "name": "b2"},
    {"type": "add", "inputs": ["b2", "r1"], "name": "res"},
    {"type": "relu"},
    {"type": "max_pool2d", "kernel_size": 2},
    {"type": "conv2d", "out_channels": 16, "kernel_size": 3, "padding": 1},
    {"type": "relu"},
    {"type": "global_avg_pool"},
    {"type": "linear", "out_features": 5}
  ],
  "loss": {"type": "cross_entropy"}})";

const char* kSgd = R"({"type": "sgd", "lr": 0.05, "momentum": 0.9})";
const char* kAdam = R"({"type": "adam", "lr": 0.01})";
const int64_t kClasses = 5;

// Parameters after 10 steps: |cuda - cpu| <= kTol * max(kFloor, |cuda|, |cpu|).
// The floor is the absolute tolerance near zero (1e-6): GPU and CPU sum in
// other orders and with other algorithms (cuDNN, cuBLAS), about 1e-6 relative
// per gradient, carried by momentum over 10 steps.
const double kTol = 1e-4, kFloor = 1e-2;

void progress(const std::string& line) {
  std::printf("cuda_group: %s\n", line.c_str());
  std::fflush(stdout);
}

std::string cuda_devices(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += i ? ",cuda:0" : "cuda:0";
  return s;
}

// a and b agree element by element: |a - b| <= tol * max(floor, |a|, |b|).
void expect_close(const std::vector<float>& a, const std::vector<float>& b, const std::string& what,
                  double tol = kTol, double floor = kFloor) {
  if (a.size() != b.size()) {
    FAIL_CHECK(what << ": " << a.size() << " values against " << b.size());
    return;
  }
  double worst = 0;
  size_t at = 0, bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double scale = std::fmax(floor, std::fmax(std::fabs(a[i]), std::fabs(b[i])));
    double rel = std::fabs(double(a[i]) - double(b[i])) / scale;
    if (!(rel <= tol)) ++bad;
    if (!(rel <= worst)) worst = rel, at = i;
  }
  if (a.empty()) return;
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << a.size() << " differ by more than " << tol
                               << " relative (floor " << floor << "); worst [" << at << "]: " << a[at] << " vs " << b[at]
                               << " (" << worst << " relative)");
  if (bad == 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2e", worst);
    progress("  " + what + ": worst relative difference " + buf);
  }
}

std::vector<float> buffers_of(const dp_model* m) {
  int64_t n = 0;
  DP_REQUIRE_OK(dp_model_num_buffers(m, &n));
  std::vector<float> b(static_cast<size_t>(n));
  if (n) DP_REQUIRE_OK(dp_model_copy_buffers(m, b.data(), n));
  return b;
}

std::vector<float> grads_of(const dp_model* m) {
  int64_t n = 0;
  DP_REQUIRE_OK(dp_model_num_parameters(m, &n));
  std::vector<float> g(static_cast<size_t>(n));
  DP_REQUIRE_OK(dp_model_copy_gradients(m, g.data(), n));
  return g;
}

// A context, a model, a group and (optionally) an optimizer.
struct Session {
  dp_context* ctx = nullptr;
  dp_model* model = nullptr;
  dp_group* group = nullptr;
  dp_optimizer* opt = nullptr;
  std::vector<int64_t> in_shape;  // per sample

  // plugin: a library to load into the context first ("" none).
  Session(const char* json, const std::string& devices, const char* opt_json = nullptr,
          int split = DP_SPLIT_CHUNK, const std::string& plugin = "") {
    DP_REQUIRE_OK(dp_context_create(&ctx));
    if (!plugin.empty()) DP_REQUIRE_OK(dp_context_load_plugin(ctx, plugin.c_str()));
    DP_REQUIRE_OK(dp_model_from_json(ctx, json, &model));
    {
      INFO("devices " << devices);
      DP_REQUIRE_OK(dp_group_create(model, devices.c_str(), &group));
    }
    DP_REQUIRE_OK(dp_group_set_option(group, DP_GROUP_SPLIT, split));
    if (opt_json) DP_REQUIRE_OK(dp_optimizer_create(group, opt_json, &opt));
    int nd = 0;
    int64_t s[DP_MAX_DIMS];
    DP_REQUIRE_OK(dp_model_input_shape(model, &nd, s));
    in_shape.assign(s, s + nd);
  }
  ~Session() {
    dp_optimizer_destroy(opt);
    dp_group_destroy(group);
    dp_model_destroy(model);
    dp_context_destroy(ctx);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int64_t per_sample() const {
    int64_t n = 1;
    for (int64_t d : in_shape) n *= d;
    return n;
  }
  std::vector<int64_t> batch_shape(int64_t batch) const {
    std::vector<int64_t> s{batch};
    s.insert(s.end(), in_shape.begin(), in_shape.end());
    return s;
  }
  // Deterministic data for step `step`: inputs in [-1, 1], class targets.
  dp_tensor* input(int64_t batch, uint64_t step) const {
    TestRng rng(1000 + step);
    std::vector<float> x(static_cast<size_t>(batch * per_sample()));
    for (float& v : x) v = rng.uniform(-1, 1);
    return make_f32(ctx, x, batch_shape(batch));
  }
  dp_tensor* target(int64_t batch, uint64_t step) const {
    TestRng rng(5000 + step);
    std::vector<int64_t> t(static_cast<size_t>(batch));
    for (auto& v : t) v = rng.next() % kClasses;
    return make_i64(ctx, t, {batch});
  }
  // One training step on step `step`'s data; returns the status, *loss the loss.
  dp_status step(int64_t batch, uint64_t step, float* loss) {
    dp_tensor* x = input(batch, step);
    dp_tensor* y = target(batch, step);
    dp_status s = dp_group_train_step(group, opt, x, y, loss);
    dp_tensor_destroy(x);
    dp_tensor_destroy(y);
    return s;
  }
  std::vector<int64_t> split() const {
    int64_t sizes[64];
    int count = 0;
    DP_REQUIRE_OK(dp_group_last_split(group, sizes, 64, &count));
    return std::vector<int64_t>(sizes, sizes + count);
  }
};

struct Run {
  std::vector<float> params, buffers, losses;
  std::vector<int64_t> split;
  float eval_loss = 0;
  int64_t eval_correct = 0;
  std::vector<float> eval_out;  // outputs in evaluation mode
};

Run train(const char* json, const std::string& devices, const char* opt, int64_t batch, int steps,
          const std::string& plugin = "") {
  Session s(json, devices, opt, DP_SPLIT_CHUNK, plugin);
  Run r;
  for (int k = 0; k < steps; ++k) {
    float loss = 0;
    dp_status st = s.step(batch, k, &loss);
    INFO(devices << " step " << k << ": " << std::string(dp_status_name(st)) << ": " << std::string(dp_last_error()));
    REQUIRE(st == DP_OK);
    r.losses.push_back(loss);
  }
  r.split = s.split();
  r.params = params_of(s.model);
  r.buffers = buffers_of(s.model);
  // Evaluation on other data: the loss, the correct count, and the outputs.
  dp_tensor* x = s.input(batch, 999);
  dp_tensor* y = s.target(batch, 999);
  DP_REQUIRE_OK(dp_group_evaluate(s.group, x, y, &r.eval_loss, &r.eval_correct));
  DP_REQUIRE_OK(dp_group_set_training(s.group, 0));
  dp_tensor* out = nullptr;
  DP_REQUIRE_OK(dp_group_forward(s.group, x, &out));
  r.eval_out = tensor_data(out);
  dp_tensor_destroy(out);
  dp_tensor_destroy(x);
  dp_tensor_destroy(y);
  return r;
}

// The smallest gap between a row's largest and second-largest output: below
// about 1e-4 the two devices may legitimately pick different arg-maxes.
double min_top2_gap(const std::vector<float>& out, int64_t classes) {
  double gap = INFINITY;
  for (size_t r = 0; r + classes <= out.size(); r += classes) {
    float a = -INFINITY, b = -INFINITY;
    for (int64_t c = 0; c < classes; ++c) {
      float v = out[r + c];
      if (v > a) b = a, a = v;
      else if (v > b) b = v;
    }
    gap = std::fmin(gap, double(a) - double(b));
  }
  return gap;
}

std::vector<int64_t> chunk_split(int64_t batch, int n) {
  int64_t chunk = (batch + n - 1) / n;
  std::vector<int64_t> s;
  for (int64_t left = batch; left > 0; left -= chunk) s.push_back(std::min(chunk, left));
  return s;
}

std::string str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Status and message of the last call, for messages.
std::string last(dp_status s) { return std::string(dp_status_name(s)) + ": " + dp_last_error(); }

// A plugin of the build: $env, or the build's path, or `rel` from this
// program in a build tree copied elsewhere (bench/gpu_pack.sh's bundle).
std::string built_plugin(const char* env, const char* build_path, const char* rel) {
  if (const char* e = std::getenv(env)) return e;
  namespace fs = std::filesystem;
  if (build_path && fs::exists(build_path)) return build_path;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path p = exe.parent_path() / rel;
    if (fs::exists(p)) return p.lexically_normal().string();
  }
  return "";
}
// swish, with its CUDA code in a build with CUDA (dp_plugin.h version 2).
std::string swish_path() { return built_plugin("DP_TEST_PLUGIN_SWISH", PLUGIN_SWISH, "../../plugins/swish.so"); }
// A plugin relu without CUDA code (a version-1 plugin).
std::string cpu_only_plugin_path() {
  return built_plugin("DP_TEST_PLUGIN_RELU", PLUGIN_RELU_FIXTURE, "../plugins/fixture_plugin_relu.so");
}
// A relu whose CUDA entries fail, saying what they were given (tests/plugins/fixtures.c).
std::string failing_cuda_plugin_path() {
  return built_plugin("DP_TEST_PLUGIN_V2_RELU", FIXTURE_V2_RELU, "../plugins/fixture_v2_relu.so");
}

}  // namespace

// ------------------------------------------------------------ equivalence --

TEST_CASE("CUDA groups train as CPU groups of the same size: MLP and CNN, SGD momentum and Adam") {
  struct Model {
    const char* name;
    const char* json;
    int64_t batch;
  };
  // The CNN's batch of 10 on 3 replicas is torch.chunk's 4, 4, 2 (batch_norm2d
  // still sees 2 x 8 x 8 values); the MLP's batch of 12 splits as 4, 4, 4:
  // batch_norm1d over 2 rows has an input gradient that is 0 up to rounding,
  // which would make the first layer's gradient device-specific noise.
  const Model models[] = {{"mlp (batch_norm1d, dropout)", kMlp, 12},
                          {"cnn (conv, batch_norm2d, residual add, pools)", kCnn, 10}};
  for (const Model& m : models) {
    const int64_t batch = m.batch;
    for (const char* opt : {kSgd, kAdam}) {
      for (int n : {1, 2, 3}) {
        const std::string where = std::string(m.name) + ", " + opt + ", " + std::to_string(n) + " replica(s), batch " +
                                  std::to_string(batch);
        progress(where);
        CAPTURE(where);
        Run cpu = train(m.json, cpu_devices(n), opt, batch, 10);
        Run gpu = train(m.json, cuda_devices(n), opt, batch, 10);
        CHECK_MESSAGE(gpu.split == chunk_split(batch, n), "split " << str(gpu.split) << ", torch.chunk's rule " << str(chunk_split(batch, n)));
        CHECK(gpu.split == cpu.split);
        expect_close(gpu.params, cpu.params, where + ": parameters after 10 steps");
        expect_close(gpu.buffers, cpu.buffers, where + ": running statistics after 10 steps");
        expect_close(gpu.losses, cpu.losses, where + ": losses of the 10 steps", 1e-4, 1e-3);
        expect_close({gpu.eval_loss}, {cpu.eval_loss}, where + ": evaluate() loss", 1e-4, 1e-3);
        expect_close(gpu.eval_out, cpu.eval_out, where + ": outputs in evaluation mode", 1e-4, 1e-2);
        double gap = min_top2_gap(cpu.eval_out, kClasses);
        if (gap > 1e-3)
          CHECK_MESSAGE(gpu.eval_correct == cpu.eval_correct,
                        where << ": evaluate() correct " << gpu.eval_correct << ", CPU " << cpu.eval_correct);
        else
          MESSAGE(where << ": correct counts not compared (an output row's top two differ by " << gap << ")");
      }
    }
  }
}

// A batch with fewer rows than replicas: torch.chunk's rule gives 2 rows to 3
// replicas as 1, 1 and the third idles; its gradients add nothing (the local
// sum's empty input), as on the CPU.
TEST_CASE("a batch with fewer rows than replicas on CUDA: the idle replica adds nothing, as on the CPU") {
  progress("idle replica: CNN, batch 2 on 3 replicas");
  Run cpu = train(kCnn, cpu_devices(3), kSgd, 2, 3);
  Run gpu = train(kCnn, cuda_devices(3), kSgd, 2, 3);
  CHECK(gpu.split == chunk_split(2, 3));
  CHECK(gpu.split == cpu.split);
  expect_close(gpu.params, cpu.params, "parameters after 3 steps of 2 rows on 3 replicas");
  expect_close(gpu.buffers, cpu.buffers, "running statistics after 3 steps of 2 rows on 3 replicas");
  expect_close(gpu.losses, cpu.losses, "losses of 2 rows on 3 replicas", 1e-4, 1e-3);
}

// clip_grad_norm_ on GPUs: the norm summed on the device (and the step the
// host decides on it), as the CPU computes it; accumulation through
// dp_group_forward_backward (2 batches of 6 with loss_scale 1/2, then a step),
// the CPU's too. With DP_CUDA_NCCL=1 set by the caller, through NCCL's buckets.
TEST_CASE("clip_grad_norm and gradient accumulation on CUDA: as on the CPU; a non-finite norm takes no step") {
  for (int n : {1, 2}) {  // (batch norm over 3 rows per replica at least: see above)
    for (bool accumulate : {false, true}) {
      const std::string where = std::to_string(n) + " replica(s), " + (accumulate ? "accumulating 2 x 6 rows" : "batch 12");
      progress("clip: " + where);
      CAPTURE(where);
      std::vector<float> params[2], norms[2];
      for (int gpu = 0; gpu < 2; ++gpu) {
        Session s(kMlp, gpu ? cuda_devices(n) : cpu_devices(n), kSgd);
        DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(s.opt, 0.05));
        for (int k = 0; k < 6; ++k) {
          if (!accumulate) {
            float loss = 0;
            DP_REQUIRE_OK(s.step(12, k, &loss));
          } else {
            for (int half = 0; half < 2; ++half) {
              dp_tensor* x = s.input(6, 2 * k + half);
              dp_tensor* y = s.target(6, 2 * k + half);
              DP_REQUIRE_OK(dp_group_forward_backward(s.group, x, y, 0.5, nullptr));
              dp_tensor_destroy(x);
              dp_tensor_destroy(y);
            }
            DP_REQUIRE_OK(dp_optimizer_step(s.opt));
            DP_REQUIRE_OK(dp_group_zero_grad(s.group));
          }
          double norm = 0;
          DP_REQUIRE_OK(dp_optimizer_grad_norm(s.opt, &norm));
          CHECK(norm > 0.05);  // clipped
          norms[gpu].push_back(static_cast<float>(norm));
        }
        params[gpu] = params_of(s.model);
      }
      expect_close(norms[1], norms[0], where + ": gradient norms of the 6 steps", 1e-4, 1e-3);
      expect_close(params[1], params[0], where + ": parameters after 6 clipped steps");
    }
  }
  // Inputs of 1e19 with a big weight: float gradients overflow, the loss (a double) does not.
  Session s(R"({"input": {"shape": [2]}, "layers": [{"type": "linear", "out_features": 1}], "loss": {"type": "mse"}})",
            cuda_devices(1), kSgd);
  const std::vector<float> p{0.5f, 0.0f, 0.0f};
  DP_REQUIRE_OK(dp_model_set_parameters(s.model, p.data(), 3));
  DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(s.opt, 1.0));
  dp_tensor* x = make_f32(s.ctx, {2e19f, 0, 2e19f, 0}, {2, 2});
  dp_tensor* t = make_f32(s.ctx, {0, 0}, {2, 1});
  CHECK(dp_group_train_step(s.group, s.opt, x, t, nullptr) == DP_ERR_NUMERIC);
  CHECK(params_of(s.model) == p);
  for (float g : grads_of(s.model)) CHECK(g == 0.0f);
  dp_tensor_destroy(x);
  dp_tensor_destroy(t);
}

namespace {

double scale_of(const dp_optimizer* opt, int64_t* skipped = nullptr, int64_t* tracker = nullptr) {
  double scale = 0;
  DP_REQUIRE_OK(dp_optimizer_grad_scaler_state(opt, &scale, tracker, skipped));
  return scale;
}

// Inputs of +-1e3 and targets 0 through a linear MSE model: gradients of
// about 1e6, whose scaled values overflow float32 above about 2^110.
dp_status big_step(Session& s, int step) {
  std::vector<float> x(16 * 6), t(16, 0.0f);
  TestRng rng(static_cast<uint64_t>(step) + 100);
  for (float& v : x) v = rng.uniform(-1e3f, 1e3f);
  dp_tensor* xt = make_f32(s.ctx, x, {16, 6});
  dp_tensor* tt = make_f32(s.ctx, t, {16, 1});
  const dp_status st = dp_group_train_step(s.group, s.opt, xt, tt, nullptr);
  dp_tensor_destroy(xt);
  dp_tensor_destroy(tt);
  return st;
}

}  // namespace

// The grad scaler on GPUs: the unscale on every slot and the inf/NaN check
// on the device (the clip norm's sum of squares), the decision on the host.
// While nothing overflows, the scaled GPU run is the unscaled GPU run bit
// for bit, and the CPU's within the usual tolerance, with the same scales;
// an overflowing scale skips steps (nothing changes on them), backs off and
// grows again, against a GPU twin without scaler that takes only the steps
// taken (so no decision is compared across devices).
TEST_CASE("the grad scaler on CUDA: bitwise the unscaled run without overflow, as the CPU; skipped steps change nothing") {
  for (int n : {1, 2}) {
    for (bool accumulate : {false, true}) {
      const std::string where = std::to_string(n) + " replica(s), " + (accumulate ? "accumulating 2 x 6 rows" : "batch 12");
      progress("grad scaler: " + where);
      CAPTURE(where);
      Session plain(kMlp, cuda_devices(n), kSgd), scaled(kMlp, cuda_devices(n), kSgd), cpu(kMlp, cpu_devices(n), kSgd);
      for (Session* s : {&plain, &scaled, &cpu}) DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(s->opt, 0.05));
      DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(scaled.opt, R"({"growth_interval": 2})"));
      DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(cpu.opt, R"({"growth_interval": 2})"));
      for (int k = 0; k < 6; ++k) {
        for (Session* s : {&plain, &scaled, &cpu}) {
          if (!accumulate) {
            DP_REQUIRE_OK(s->step(12, k, nullptr));
            continue;
          }
          const double scale = scale_of(s->opt);  // the caller scales forward_backward's loss
          for (int half = 0; half < 2; ++half) {
            dp_tensor* x = s->input(6, 2 * k + half);
            dp_tensor* y = s->target(6, 2 * k + half);
            DP_REQUIRE_OK(dp_group_forward_backward(s->group, x, y, 0.5 * scale, nullptr));
            dp_tensor_destroy(x);
            dp_tensor_destroy(y);
          }
          DP_REQUIRE_OK(dp_optimizer_step(s->opt));
          DP_REQUIRE_OK(dp_group_zero_grad(s->group));
        }
        CHECK(scale_of(scaled.opt) == scale_of(cpu.opt));
      }
      CHECK(params_of(scaled.model) == params_of(plain.model));
      expect_close(params_of(scaled.model), params_of(cpu.model), where + ": parameters after 6 scaled steps");
      CHECK(scale_of(scaled.opt) == std::ldexp(1.0, 19));
    }
    // Overflow from 2^127.
    const char* linear = R"({"seed": 3, "input": {"shape": [6]},
      "layers": [{"type": "linear", "out_features": 4}, {"type": "linear", "out_features": 1}], "loss": {"type": "mse"}})";
    const char* sgd = R"({"type": "sgd", "lr": 1e-10, "momentum": 0.9})";
    Session over(linear, cuda_devices(n), sgd), twin(linear, cuda_devices(n), sgd);
    DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(over.opt, R"({"init_scale": 1.7014118346046923e38, "growth_interval": 3})"));
    int64_t skipped = 0, grown_then_skipped = 0;
    double last = scale_of(over.opt);
    bool grew = false;
    for (int k = 0; k < 30; ++k) {
      CAPTURE(k);
      const std::vector<float> before = params_of(over.model);
      int64_t was = 0;
      scale_of(over.opt, &was);
      DP_REQUIRE_OK(big_step(over, k));
      const double now = scale_of(over.opt, &skipped);
      if (skipped > was) {
        CHECK(now == last / 2);
        CHECK(params_of(over.model) == before);
        for (float g : grads_of(over.model)) CHECK(g == 0.0f);
        grown_then_skipped += grew;
      } else {
        DP_REQUIRE_OK(big_step(twin, k));
      }
      REQUIRE(params_of(over.model) == params_of(twin.model));
      grew = now > last;
      last = now;
    }
    CHECK(skipped >= 15);
    CHECK(grown_then_skipped >= 1);
  }
}

// A step the scaler must hold with an error, as on the CPU: a scale whose
// inverse overflows float32 (1e-39), and finite scaled gradients that
// overflow once unscaled by a scale below 1 (with clipping: their norm).
TEST_CASE("the grad scaler on CUDA: a scale whose inverse overflows, gradients that overflow once unscaled: errors") {
  for (int n : {1, 2}) {
    for (double clip : {0.0, 1.0}) {
      const std::string where = std::to_string(n) + " replica(s), clip " + std::to_string(clip);
      progress("grad scaler errors: " + where);
      CAPTURE(where);
      Session s(kMlp, cuda_devices(n), kSgd);
      DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(s.opt, R"({"init_scale": 1e-39})"));
      if (clip > 0) DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(s.opt, clip));
      const std::vector<float> p = params_of(s.model);
      int64_t skipped = -1, tracker = -1;
      const double scale = scale_of(s.opt, &skipped, &tracker);
      const dp_status st = s.step(12, 0, nullptr);
      CHECK_MESSAGE(st == DP_ERR_NUMERIC, last(st));
      CHECK(std::string(dp_last_error()).find("inverse overflows float32") != std::string::npos);
      CHECK(params_of(s.model) == p);
      int64_t skipped2 = -1, tracker2 = -1;
      CHECK(scale_of(s.opt, &skipped2, &tracker2) == scale);
      CHECK(skipped2 == skipped);
      CHECK(tracker2 == tracker);
      for (float g : grads_of(s.model)) CHECK(g == 0.0f);
      DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(s.opt, "{}"));
      DP_REQUIRE_OK(s.step(12, 0, nullptr));
      CHECK(params_of(s.model) != p);
    }
    // Scale 0.25 and an output gradient of 2e38 as scaled: finite on the
    // device, infinite times 4; with clipping, the norm is infinite. A model
    // without batch norm, whose backward would spread 2e38 into sums that
    // overflow while still scaled (a skip, not this error).
    progress("grad scaler errors: unscaled overflow, " + std::to_string(n) + " replica(s)");
    const char* small = R"({"seed": 5, "input": {"shape": [6]},
      "layers": [{"type": "linear", "out_features": 12}, {"type": "tanh"}, {"type": "linear", "out_features": 5}],
      "loss": {"type": "cross_entropy"}})";
    Session s(small, cuda_devices(n), kSgd);
    DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(s.opt, R"({"init_scale": 0.25})"));
    DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(s.opt, 1.0));
    DP_REQUIRE_OK(s.step(12, 0, nullptr));
    int64_t tracker = -1;
    REQUIRE(scale_of(s.opt, nullptr, &tracker) == 0.25);
    REQUIRE(tracker == 1);
    const std::vector<float> p = params_of(s.model);
    dp_tensor* x = s.input(8, 1);
    dp_tensor* out = nullptr;
    DP_REQUIRE_OK(dp_group_zero_grad(s.group));
    DP_REQUIRE_OK(dp_group_forward(s.group, x, &out));
    std::vector<float> go(static_cast<size_t>(8 * kClasses), 0.0f);
    go[2] = 2e38f;
    dp_tensor* gout = make_f32(s.ctx, go, {8, kClasses});
    DP_REQUIRE_OK(dp_group_backward(s.group, gout));
    bool finite = true;
    for (float g : grads_of(s.model)) finite = finite && std::isfinite(g);
    REQUIRE(finite);
    const dp_status st = dp_optimizer_step(s.opt);
    CHECK_MESSAGE(st == DP_ERR_NUMERIC, last(st));
    CHECK(std::string(dp_last_error()).find("overflow float32") != std::string::npos);
    CHECK(params_of(s.model) == p);
    int64_t skipped = -1;
    CHECK(scale_of(s.opt, &skipped, &tracker) == 0.25);
    CHECK(skipped == 0);
    CHECK(tracker == 1);
    DP_REQUIRE_OK(dp_group_zero_grad(s.group));
    DP_REQUIRE_OK(s.step(12, 2, nullptr));
    CHECK(params_of(s.model) != p);
    for (dp_tensor* t : {x, out, gout}) dp_tensor_destroy(t);
  }
}

TEST_CASE("forward + backward on CUDA: outputs and gradients as on the CPU, accumulating over two backwards") {
  for (const char* json : {kMlp, kCnn}) {
    for (int n : {1, 3}) {
      const std::string where = std::string(json == kMlp ? "mlp" : "cnn") + ", " + std::to_string(n) + " replica(s)";
      progress("forward + backward: " + where);
      CAPTURE(where);
      Session cpu(json, cpu_devices(n)), gpu(json, cuda_devices(n));
      const int64_t batch = json == kMlp ? 12 : 10;  // as in the training test
      std::vector<float> go(static_cast<size_t>(batch * kClasses));
      TestRng rng(77);
      for (float& v : go) v = rng.uniform(-1, 1);
      std::vector<std::vector<float>> outs, g1, g2;
      for (Session* s : {&cpu, &gpu}) {
        dp_tensor* x = s->input(batch, 3);
        dp_tensor* gout = make_f32(s->ctx, go, {batch, kClasses});
        dp_tensor* out = nullptr;
        DP_REQUIRE_OK(dp_group_zero_grad(s->group));
        DP_REQUIRE_OK(dp_group_forward(s->group, x, &out));
        CHECK(shape_of(out) == std::vector<int64_t>{batch, kClasses});
        outs.push_back(tensor_data(out));
        DP_REQUIRE_OK(dp_group_backward(s->group, gout));
        g1.push_back(grads_of(s->model));
        DP_REQUIRE_OK(dp_group_backward(s->group, gout));
        g2.push_back(grads_of(s->model));
        dp_tensor_destroy(out);
        dp_tensor_destroy(gout);
        dp_tensor_destroy(x);
      }
      expect_close(outs[1], outs[0], where + ": forward output");
      expect_close(g1[1], g1[0], where + ": gradients after one backward");
      std::vector<float> twice(g1[1].size());
      for (size_t i = 0; i < twice.size(); ++i) twice[i] = 2 * g1[1][i];
      // Not exactly 2x with several replicas: (a + b + c) + a + b + c rounds.
      expect_close(g2[1], twice, where + ": CUDA gradients after a second backward = 2x the first", 1e-5, 1e-2);
      expect_close(g2[1], g2[0], where + ": gradients after two backwards");
      double norm = 0;
      for (float v : g1[1]) norm += std::fabs(v);
      CHECK_MESSAGE(norm > 0, where << ": all CUDA gradients are 0");
      DP_REQUIRE_OK(dp_group_zero_grad(gpu.group));
      std::vector<float> z = grads_of(gpu.model);
      size_t nonzero = 0;
      for (float v : z) nonzero += v != 0.f;
      CHECK_MESSAGE(nonzero == 0, where << ": " << nonzero << " gradients not zero after dp_group_zero_grad");
    }
  }
}

TEST_CASE("3 CUDA replicas with the balanced split, NCCL on one GPU, TF32 allowed, device counts") {
  int n = -1;
  const char* why = nullptr;
  CHECK(dp_device_count("tpu", &n, &why) == DP_ERR_INVALID_ARGUMENT);
  DP_REQUIRE_OK(dp_device_count("cuda", &n, &why));
  CHECK(n >= 1);
  progress("DP_CUDA_NCCL=1 (the NCCL all-reduce path on one GPU), cuda:0, MLP, Adam, 5 steps");
  {
    setenv("DP_CUDA_NCCL", "1", 1);
    std::unique_ptr<Session> gpu;
    try {
      gpu = std::make_unique<Session>(kMlp, "cuda:0", kAdam);
    } catch (...) {
      unsetenv("DP_CUDA_NCCL");
      throw;
    }
    unsetenv("DP_CUDA_NCCL");
    Session cpu(kMlp, "cpu:0", kAdam);
    for (int k = 0; k < 5; ++k) {
      float a = 0, b = 0;
      DP_REQUIRE_OK(cpu.step(10, k, &a));
      dp_status st = gpu->step(10, k, &b);
      INFO("step " << k << " with NCCL: " << last(st));
      REQUIRE(st == DP_OK);
    }
    expect_close(params_of(gpu->model), params_of(cpu.model), "NCCL on one GPU: parameters after 5 steps");
  }
  progress("balanced split on cuda:0 x3, batch 10");
  {
    Session cpu(kCnn, cpu_devices(3), kSgd, DP_SPLIT_BALANCED), gpu(kCnn, cuda_devices(3), kSgd, DP_SPLIT_BALANCED);
    for (int k = 0; k < 3; ++k) {
      float a = 0, b = 0;
      DP_REQUIRE_OK(cpu.step(10, k, &a));
      DP_REQUIRE_OK(gpu.step(10, k, &b));
    }
    CHECK(gpu.split() == std::vector<int64_t>{4, 3, 3});
    expect_close(params_of(gpu.model), params_of(cpu.model), "balanced split: parameters after 3 steps");
  }
  progress("DP_GROUP_ALLOW_TF32 = 1 on cuda:0");
  {
    Session cpu(kCnn, "cpu:0", kSgd), gpu(kCnn, "cuda:0", kSgd);
    dp_status st = dp_group_set_option(gpu.group, DP_GROUP_ALLOW_TF32, 1);
    CHECK_MESSAGE(st == DP_OK, "dp_group_set_option(DP_GROUP_ALLOW_TF32, 1): " << last(st));
    for (int k = 0; k < 3; ++k) {
      float a = 0, b = 0;
      DP_REQUIRE_OK(cpu.step(10, k, &a));
      DP_REQUIRE_OK(gpu.step(10, k, &b));
      CHECK_MESSAGE(std::fabs(a - b) <= 1e-2 * std::fmax(1.0, std::fabs(a)), "TF32 step " << k << ": loss " << b
                                                                                         << ", CPU " << a);
    }
    // TF32 keeps about 10 bits of mantissa: 1e-2 relative, not 1e-4.
    expect_close(params_of(gpu.model), params_of(cpu.model), "TF32: parameters after 3 steps", 1e-2, 1e-1);
    CHECK(dp_group_set_option(gpu.group, DP_GROUP_ALLOW_TF32, 0) == DP_OK);
    float c = 0;
    DP_REQUIRE_OK(gpu.step(10, 7, &c));
  }
}

// ----------------------------------------------------------------- errors --

TEST_CASE("cross entropy's class weights and ignore_index: refused on a GPU group at creation, naming them") {
  progress("errors: a weighted cross entropy on CUDA");
  dp_context* ctx = nullptr;
  dp_model* m = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  const char* weighted = R"({"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 3}],
    "loss": {"type": "cross_entropy", "weight": [1, 2, 3]}})";
  DP_REQUIRE_OK(dp_model_from_json(ctx, weighted, &m));
  dp_group* g = reinterpret_cast<dp_group*>(0x1);
  dp_status st = dp_group_create(m, "cuda:0", &g);
  CHECK_MESSAGE(st == DP_ERR_MODEL, last(st));
  CHECK(std::string(dp_last_error()).find("weight and ignore_index run on CPU devices only") != std::string::npos);
  for (const char* loss : {"cross_entropy", "mse"}) {  // reduction "sum" too
    CAPTURE(loss);
    const std::string summed = std::string(R"({"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 3}],
      "loss": {"type": ")") + loss + R"(", "reduction": "sum"}})";
    dp_model* s = nullptr;
    DP_REQUIRE_OK(dp_model_from_json(ctx, summed.c_str(), &s));
    dp_group* sg = reinterpret_cast<dp_group*>(0x1);
    dp_status ss = dp_group_create(s, "cuda:0", &sg);
    CHECK_MESSAGE(ss == DP_ERR_MODEL, last(ss));
    CHECK(std::string(dp_last_error()).find("/loss/reduction: \"sum\" runs on CPU devices only so far") != std::string::npos);
    CHECK(sg == reinterpret_cast<dp_group*>(0x1));
    dp_model_destroy(s);
  }
  CHECK(g == reinterpret_cast<dp_group*>(0x1));
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0", &g));  // the model is still usable
  dp_group_destroy(g);
  dp_model_destroy(m);
  dp_context_destroy(ctx);
}

// A model with a loss or layer that has no CUDA code yet: refused when the
// GPU group is created, naming it; the model still trains on a CPU.
TEST_CASE("losses (nll, l1, smooth_l1, huber, bce, bce_with_logits) and layers (layer_norm) without CUDA code: refused on a GPU group at creation") {
  progress("errors: CPU-only losses and layers on CUDA");
  dp_context* ctx = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  std::vector<std::pair<std::string, std::string>> cases;  // model, the error's words
  for (const std::string type : {"nll", "l1", "smooth_l1", "huber", "bce", "bce_with_logits"})
    cases.push_back({R"({"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 3}, {"type": "sigmoid"}],
      "loss": {"type": ")" + type + "\"}}",
                     "/loss (type '" + type + "'): this loss runs on CPU devices only so far"});
  cases.push_back({R"({"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 3, "name": "fc"},
    {"type": "layer_norm", "normalized_shape": 3, "name": "norm"}], "loss": {"type": "mse"}})",
                   "/layers/1 ('norm', type 'layer_norm'): this layer type runs on CPU devices only so far"});
  for (const auto& c : cases) {
    const std::string& json = c.first;
    const std::string& words = c.second;
    CAPTURE(json);
    dp_model* m = nullptr;
    DP_REQUIRE_OK(dp_model_from_json(ctx, json.c_str(), &m));
    dp_group* g = reinterpret_cast<dp_group*>(0x1);
    dp_status st = dp_group_create(m, "cuda:0", &g);
    CHECK_MESSAGE(st == DP_ERR_DEVICE, last(st));
    CHECK(std::string(dp_last_error()).find(words) != std::string::npos);
    CHECK(g == reinterpret_cast<dp_group*>(0x1));
    DP_REQUIRE_OK(dp_group_create(m, "cpu:0", &g));  // the model is still usable
    dp_group_destroy(g);
    dp_model_destroy(m);
  }
  dp_context_destroy(ctx);
}

TEST_CASE("device errors: cuda:99, cpu and cuda mixed") {
  progress("errors: bad device lists");
  dp_context* ctx = nullptr;
  dp_model* m = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  DP_REQUIRE_OK(dp_model_from_json(ctx, kMlp, &m));
  dp_group* g = reinterpret_cast<dp_group*>(0x1);
  dp_status st = dp_group_create(m, "cuda:99", &g);
  CHECK_MESSAGE(st == DP_ERR_DEVICE, "cuda:99: " << last(st));
  CHECK_MESSAGE(std::string(dp_last_error()).find("cuda:99") != std::string::npos,
                "the message should name cuda:99: " << std::string(dp_last_error()));
  CHECK(g == reinterpret_cast<dp_group*>(0x1));
  st = dp_group_create(m, "cpu:0,cuda:0", &g);
  CHECK_MESSAGE(st == DP_ERR_DEVICE, "cpu:0,cuda:0: " << last(st));
  st = dp_group_create(m, "cuda:0,cpu:0", &g);
  CHECK_MESSAGE(st == DP_ERR_DEVICE, "cuda:0,cpu:0: " << last(st));
  CHECK(g == reinterpret_cast<dp_group*>(0x1));
  // The model is still usable: a good CUDA group on it trains.
  DP_REQUIRE_OK(dp_group_create(m, "cuda:0", &g));
  dp_optimizer* opt = nullptr;
  DP_REQUIRE_OK(dp_optimizer_create(g, kSgd, &opt));
  std::vector<float> x(4 * 12, 0.5f);
  dp_tensor* in = make_f32(ctx, x, {4, 12});
  dp_tensor* t = make_i64(ctx, {0, 1, 2, 3}, {4});
  float loss = 0;
  DP_REQUIRE_OK(dp_group_train_step(g, opt, in, t, &loss));
  CHECK(std::isfinite(loss));
  int nd = 0;
  DP_REQUIRE_OK(dp_group_num_devices(g, &nd));
  CHECK(nd == 1);
  dp_tensor_destroy(in);
  dp_tensor_destroy(t);
  dp_optimizer_destroy(opt);
  dp_group_destroy(g);
  dp_model_destroy(m);
  dp_context_destroy(ctx);
}

TEST_CASE("step errors on CUDA: NaN input, wrong target shape; the group stays usable") {
  for (int n : {1, 2}) {
    const std::string where = std::to_string(n) + " replica(s)";
    progress("errors: NaN input and bad targets, " + where);
    CAPTURE(where);
    Session s(kMlp, cuda_devices(n), kAdam);
    float loss = 0;
    DP_REQUIRE_OK(s.step(8, 0, &loss));
    // NaN in one row: DP_ERR_NUMERIC, parameters and running statistics unchanged.
    std::vector<float> p0 = params_of(s.model), b0 = buffers_of(s.model);
    std::vector<float> x(static_cast<size_t>(8 * 12), 0.25f);
    for (int i = 0; i < 12; ++i) x[static_cast<size_t>(5 * 12 + i)] = NAN;
    dp_tensor* in = make_f32(s.ctx, x, {8, 12});
    dp_tensor* t = s.target(8, 1);
    dp_status st = dp_group_train_step(s.group, s.opt, in, t, &loss);
    CHECK_MESSAGE(st == DP_ERR_NUMERIC, "NaN input: " << last(st));
    CHECK(params_of(s.model) == p0);
    CHECK_MESSAGE(buffers_of(s.model) == b0, "running statistics changed by a step that failed");
    // Then a good step works and changes the parameters.
    st = s.step(8, 2, &loss);
    CHECK_MESSAGE(st == DP_OK, "the step after the NaN one: " << last(st));
    CHECK(std::isfinite(loss));
    CHECK(params_of(s.model) != p0);
    // Wrong target shapes: [B + 1], [B, 1], float targets.
    dp_tensor* good = s.input(8, 3);
    dp_tensor* t9 = s.target(9, 3);
    st = dp_group_train_step(s.group, s.opt, good, t9, &loss);
    CHECK_MESSAGE(st == DP_ERR_SHAPE, "target [9] for a batch of 8: " << last(st));
    std::vector<int64_t> t81(8, 1);
    dp_tensor* t2d = make_i64(s.ctx, t81, {8, 1});
    st = dp_group_train_step(s.group, s.opt, good, t2d, &loss);
    CHECK_MESSAGE(st == DP_ERR_SHAPE, "target [8, 1]: " << last(st));
    std::vector<int64_t> wrong_in_shape{8, 13};
    dp_tensor* bad_in = make_f32(s.ctx, std::vector<float>(8 * 13, 0.f), wrong_in_shape);
    st = dp_group_train_step(s.group, s.opt, bad_in, t, &loss);
    CHECK_MESSAGE(st == DP_ERR_SHAPE, "input [8, 13] for a model of [12]: " << last(st));
    std::vector<float> p1 = params_of(s.model);
    st = s.step(8, 4, &loss);
    CHECK_MESSAGE(st == DP_OK, "the step after the shape errors: " << last(st));
    CHECK(std::isfinite(loss));
    CHECK(params_of(s.model) != p1);
    dp_tensor_destroy(bad_in);
    dp_tensor_destroy(t2d);
    dp_tensor_destroy(t9);
    dp_tensor_destroy(good);
    dp_tensor_destroy(t);
    dp_tensor_destroy(in);
  }
}

TEST_CASE("a plugin layer type without a CUDA implementation: a clear error at group creation") {
  progress("errors: plugin layer without CUDA code on cuda:0");
  std::string relu = cpu_only_plugin_path();
  if (relu.empty()) {
    FAIL_CHECK("fixture_plugin_relu.so not found: set DP_TEST_PLUGIN_RELU to the build's tests/plugins/fixture_plugin_relu.so");
    return;
  }
  dp_context* ctx = nullptr;
  dp_model* m = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  DP_REQUIRE_OK(dp_context_load_plugin(ctx, relu.c_str()));
  DP_REQUIRE_OK(dp_model_from_json(ctx, R"({"input": {"shape": [6]}, "layers": [
      {"type": "linear", "out_features": 4}, {"type": "plugin_relu", "name": "act"}, {"type": "linear", "out_features": 3}],
      "loss": {"type": "cross_entropy"}})", &m));
  dp_group* g = reinterpret_cast<dp_group*>(0x1);
  dp_status st = dp_group_create(m, "cuda:0", &g);
  std::string msg = dp_last_error();
  MESSAGE("plugin layer on cuda:0: " << std::string(dp_status_name(st)) << ": " << msg);
  CHECK_MESSAGE(st == DP_ERR_DEVICE, "a plugin_relu layer on cuda:0: " << std::string(dp_status_name(st)) << " (dp.h: DP_ERR_DEVICE)");
  CHECK_MESSAGE(msg.find("plugin_relu") != std::string::npos, "the message should name the layer type: " << msg);
  CHECK_MESSAGE((msg.find("act") != std::string::npos || msg.find("/layers/1") != std::string::npos),
                "the message should name the layer ('act' or /layers/1): " << msg);
  if (st == DP_OK) dp_group_destroy(g);
  // The same model trains on the CPU.
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0", &g));
  dp_optimizer* opt = nullptr;
  DP_REQUIRE_OK(dp_optimizer_create(g, kSgd, &opt));
  dp_tensor* in = make_f32(ctx, std::vector<float>(12, 0.5f), {2, 6});
  dp_tensor* t = make_i64(ctx, {0, 2}, {2});
  float loss = 0;
  DP_REQUIRE_OK(dp_group_train_step(g, opt, in, t, &loss));
  dp_tensor_destroy(in);
  dp_tensor_destroy(t);
  dp_optimizer_destroy(opt);
  dp_group_destroy(g);
  dp_model_destroy(m);
  dp_context_destroy(ctx);
}

// A plugin layer type with CUDA code (swish's, dp_plugin.h version 2) in a
// model, on 1, 2 and 3 replicas of cuda:0 against CPU groups of the same size:
// its CUDA forward and backward (beta's gradient summed on the GPU), the
// optimizer on its parameter, evaluation.
// A plugin's CUDA entry that fails: DP_ERR_PLUGIN naming the layer and the
// plugin's message, which shows what the host gave it (a CUDA device, its
// ordinal, the replica's stream, device views); nothing changes, the group
// fails the same way again and is destroyed cleanly.
TEST_CASE("a plugin's failing CUDA code: its error with the layer, what it was given, nothing changed") {
  const std::string path = failing_cuda_plugin_path();
  REQUIRE_MESSAGE(!path.empty(), "fixture_v2_relu.so not found: set DP_TEST_PLUGIN_V2_RELU");
  progress("a failing plugin CUDA entry");
  const char* json = R"({"seed": 2, "input": {"shape": [12]}, "layers": [
    {"type": "linear", "out_features": 8}, {"type": "fixture_v2_relu", "name": "act"},
    {"type": "linear", "out_features": 5}], "loss": {"type": "cross_entropy"}})";
  Session s(json, "cuda:0", kSgd, DP_SPLIT_CHUNK, path);
  const std::vector<float> p = params_of(s.model);
  for (int attempt = 0; attempt < 2; ++attempt) {
    CAPTURE(attempt);
    const dp_status st = s.step(4, 0, nullptr);
    CHECK_MESSAGE(st == DP_ERR_PLUGIN, last(st));
    const std::string why = dp_last_error();
    for (const char* part : {"/layers/1", "fixture_v2_relu", "device type 1, index 0, stream set, input on device type 1"})
      CHECK_MESSAGE(why.find(part) != std::string::npos, "no '" << part << "' in: " << why);
    CHECK(params_of(s.model) == p);
  }
}

TEST_CASE("a plugin layer type with CUDA code (swish) trains on cuda:0 x1, x2, x3 as on the CPU") {
  std::string swish = swish_path();
  if (swish.empty()) {
    FAIL_CHECK("swish.so not found: set DP_TEST_PLUGIN_SWISH to the build's plugins/swish.so");
    return;
  }
  // (A swish.so built without CUDA fails at group creation with DP_ERR_DEVICE, naming swish.)
  const char* json = R"({
    "seed": 3, "input": {"shape": [12]},
    "layers": [
      {"type": "linear", "out_features": 32},
      {"type": "swish", "name": "s1"},
      {"type": "linear", "out_features": 16},
      {"type": "swish", "name": "s2"},
      {"type": "linear", "out_features": 5}
    ],
    "loss": {"type": "cross_entropy"}})";
  for (const char* opt : {kSgd, kAdam})
    for (int n : {1, 2, 3}) {
      const std::string where = std::string("swish plugin, ") + opt + ", " + std::to_string(n) + " replica(s)";
      progress(where);
      CAPTURE(where);
      Run cpu = train(json, cpu_devices(n), opt, 10, 10, swish);
      Run gpu = train(json, cuda_devices(n), opt, 10, 10, swish);
      CHECK(gpu.split == cpu.split);
      expect_close(gpu.params, cpu.params, where + ": parameters (the betas included) after 10 steps");
      expect_close(gpu.losses, cpu.losses, where + ": losses of the 10 steps", 1e-4, 1e-3);
      expect_close(gpu.eval_out, cpu.eval_out, where + ": outputs in evaluation mode", 1e-4, 1e-2);
    }
}

// -------------------------------------------------------------- checkpoint --

TEST_CASE("checkpoint round trip on cuda:0: 3 steps, save, load into a fresh group, 2 more steps on both") {
  for (const char* opt : {kSgd, kAdam}) {
    progress(std::string("checkpoint round trip, ") + opt);
    const std::string optimizer = opt;
    CAPTURE(optimizer);
    namespace fs = std::filesystem;
    fs::path path = fs::temp_directory_path() / ("dp_cuda_ckpt_" + std::to_string(getpid()) + ".safetensors");
    Session a(kMlp, "cuda:0", opt);
    float la = 0, lb = 0;
    for (int k = 0; k < 3; ++k) DP_REQUIRE_OK(a.step(10, k, &la));
    DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), a.group, a.opt, nullptr, R"({"test": "cuda"})"));
    Session b(kMlp, "cuda:0", opt);
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), b.group, b.opt, nullptr));
    CHECK_MESSAGE(params_of(b.model) == params_of(a.model), "parameters differ right after loading");
    CHECK_MESSAGE(buffers_of(b.model) == buffers_of(a.model), "running statistics differ right after loading");
    for (int k = 3; k < 5; ++k) {
      DP_REQUIRE_OK(a.step(10, k, &la));
      DP_REQUIRE_OK(b.step(10, k, &lb));
      CHECK_MESSAGE(std::fabs(la - lb) <= 1e-6 * std::fmax(1.0, std::fabs(la)), "step " << k << ": loss " << lb
                                                                                       << " after loading, " << la);
    }
    // Same GPU, same kernels: equal up to cuDNN's choice of algorithm.
    expect_close(params_of(b.model), params_of(a.model), "parameters 2 steps after the round trip", 1e-5, 1e-2);
    expect_close(buffers_of(b.model), buffers_of(a.model), "running statistics 2 steps after the round trip", 1e-5, 1e-2);
    // And a CPU group loads the CUDA group's checkpoint.
    Session c(kMlp, "cpu:0", opt);
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), c.group, c.opt, nullptr));
    // Loaded into an optimizer that has stepped on the GPU, then saved before
    // its next step: the file holds the loaded state, not the GPU's older one
    // (the optimizer state is compared through a CPU group's next steps).
    const fs::path again = path.string() + ".again";
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), a.group, a.opt, nullptr));
    DP_REQUIRE_OK(dp_checkpoint_save(again.c_str(), a.group, a.opt, nullptr, nullptr));
    Session d(kMlp, "cpu:0", opt);
    DP_REQUIRE_OK(dp_checkpoint_load(again.c_str(), d.group, d.opt, nullptr));
    for (int k = 3; k < 5; ++k) {
      DP_REQUIRE_OK(c.step(10, k, &la));
      DP_REQUIRE_OK(d.step(10, k, &lb));
    }
    CHECK_MESSAGE(params_of(d.model) == params_of(c.model), "a checkpoint loaded and saved again on cuda:0 lost "
                                                            "the loaded optimizer state");
    fs::remove(path);
    fs::remove(again);
  }
}

// dp_optimizer_copy_state reads the GPU's newest state; set_state's values
// reach the GPU at the next step: a CPU group given the GPU group's state
// continues as the GPU group does, and a GPU group given a CPU group's state
// (after stepping with its own) continues as the CPU group does.
TEST_CASE("optimizer state through the C ABI on cuda:0: read from and written to a GPU group") {
  for (const char* opt : {kSgd, kAdam}) {
    progress(std::string("optimizer state, ") + opt);
    const std::string optimizer = opt;
    CAPTURE(optimizer);
    Session gpu(kMlp, "cuda:0", opt), cpu(kMlp, "cpu:0", opt);
    float loss = 0;
    // Both take 3 steps (dropout's masks are keyed by the group's step count).
    for (int k = 0; k < 3; ++k) {
      DP_REQUIRE_OK(gpu.step(10, k, &loss));
      DP_REQUIRE_OK(cpu.step(10, k, &loss));
    }
    int64_t n = 0, steps = 0;
    DP_REQUIRE_OK(dp_model_num_parameters(gpu.model, &n));
    DP_REQUIRE_OK(dp_optimizer_steps(gpu.opt, &steps));
    CHECK(steps == 3);
    int count = 0;
    DP_REQUIRE_OK(dp_optimizer_num_states(gpu.opt, &count));
    std::vector<std::vector<float>> states;
    std::vector<std::string> names;
    for (int i = 0; i < count; ++i) {
      const char* name = nullptr;
      DP_REQUIRE_OK(dp_optimizer_state_name(gpu.opt, i, &name));
      names.emplace_back(name);
      states.emplace_back(static_cast<size_t>(n));
      DP_REQUIRE_OK(dp_optimizer_copy_state(gpu.opt, name, states.back().data(), n));
      bool nonzero = false;
      for (float v : states.back()) nonzero = nonzero || v != 0.0f;
      CHECK_MESSAGE(nonzero, name << " read from the GPU is all zero: the host's stale copy");
    }
    // The CPU group takes the GPU group's parameters and state.
    const std::vector<float> p = params_of(gpu.model);
    DP_REQUIRE_OK(dp_model_set_parameters(cpu.model, p.data(), n));
    for (size_t i = 0; i < names.size(); ++i)
      DP_REQUIRE_OK(dp_optimizer_set_state(cpu.opt, names[i].c_str(), states[i].data(), n));
    DP_REQUIRE_OK(dp_optimizer_set_steps(cpu.opt, steps));
    // And the GPU group is given other state: its own, halved (uploaded before its next step).
    std::vector<std::vector<float>> halved = states;
    for (auto& st : halved)
      for (float& v : st) v *= 0.5f;
    for (size_t i = 0; i < names.size(); ++i) {
      DP_REQUIRE_OK(dp_optimizer_set_state(gpu.opt, names[i].c_str(), halved[i].data(), n));
      DP_REQUIRE_OK(dp_optimizer_set_state(cpu.opt, names[i].c_str(), halved[i].data(), n));
    }
    for (int k = 3; k < 5; ++k) {
      DP_REQUIRE_OK(gpu.step(10, k, &loss));
      DP_REQUIRE_OK(cpu.step(10, k, &loss));
    }
    expect_close(params_of(gpu.model), params_of(cpu.model), "parameters 2 steps after the state was set", 1e-4, 1e-2);
    for (size_t i = 0; i < names.size(); ++i) {
      std::vector<float> g(static_cast<size_t>(n)), c(static_cast<size_t>(n));
      DP_REQUIRE_OK(dp_optimizer_copy_state(gpu.opt, names[i].c_str(), g.data(), n));
      DP_REQUIRE_OK(dp_optimizer_copy_state(cpu.opt, names[i].c_str(), c.data(), n));
      expect_close(g, c, names[i] + " 2 steps after the state was set", 1e-4, 1e-2);
    }
  }
}

// A GPU holds one optimizer's state at a time: two optimizers used in turn on
// one group must each keep their own (the second's upload must not lose the
// first's), as on the CPU, where each optimizer's state is its own array.
TEST_CASE("two optimizers used in turn on one CUDA group each keep their own state, as on the CPU") {
  progress("two optimizers in turn");
  Session gpu(kMlp, "cuda:0", kSgd), cpu(kMlp, "cpu:0", kSgd);
  dp_optimizer* gpu_adam = nullptr;
  dp_optimizer* cpu_adam = nullptr;
  DP_REQUIRE_OK(dp_optimizer_create(gpu.group, kAdam, &gpu_adam));
  DP_REQUIRE_OK(dp_optimizer_create(cpu.group, kAdam, &cpu_adam));
  float loss = 0;
  for (int k = 0; k < 6; ++k) {  // sgd, adam, sgd, adam, ...
    dp_optimizer* g = k % 2 ? gpu_adam : gpu.opt;
    dp_optimizer* c = k % 2 ? cpu_adam : cpu.opt;
    std::swap(gpu.opt, g);
    std::swap(cpu.opt, c);
    const dp_status gs = gpu.step(10, k, &loss), cs = cpu.step(10, k, &loss);
    std::swap(gpu.opt, g);
    std::swap(cpu.opt, c);
    DP_REQUIRE_OK(gs);
    DP_REQUIRE_OK(cs);
  }
  expect_close(params_of(gpu.model), params_of(cpu.model), "parameters after 6 alternating steps", 1e-4, 1e-2);
  int64_t n = 0;
  DP_REQUIRE_OK(dp_model_num_parameters(gpu.model, &n));
  auto state = [n](dp_optimizer* o, const char* name) {
    std::vector<float> v(static_cast<size_t>(n));
    DP_REQUIRE_OK(dp_optimizer_copy_state(o, name, v.data(), n));
    return v;
  };
  expect_close(state(gpu.opt, "momentum_buffer"), state(cpu.opt, "momentum_buffer"), "sgd's momentum", 1e-4, 1e-2);
  expect_close(state(gpu_adam, "exp_avg"), state(cpu_adam, "exp_avg"), "adam's exp_avg", 1e-4, 1e-2);
  expect_close(state(gpu_adam, "exp_avg_sq"), state(cpu_adam, "exp_avg_sq"), "adam's exp_avg_sq", 1e-4, 1e-2);
  // Destroyed while its state is on the GPU: the next optimizer uploads its own.
  dp_optimizer_destroy(gpu_adam);
  dp_optimizer_destroy(cpu_adam);
  DP_REQUIRE_OK(gpu.step(10, 6, &loss));
  DP_REQUIRE_OK(cpu.step(10, 6, &loss));
  expect_close(params_of(gpu.model), params_of(cpu.model), "parameters after the adam optimizer was destroyed", 1e-4,
               1e-2);
}

// ------------------------------------------------------- cudnn benchmark --

// Mixed precision (DP_GROUP_PRECISION). Against float32 on the CPU, bf16's
// operands carry 8 significant bits, and a rounding that flips the sign of a
// value entering a relu moves a parameter by ~lr x gradient whatever its size:
// after 10 steps (lr 0.05, momentum 0.9) up to 3e-3 absolute in bf16, 1.8e-3
// in fp16 (a review's CPU simulation of this model, SGD and data with
// round-to-nearest-even 16-bit operands over 200 initialisations), so 2e-2 /
// 1e-2 relative with a floor of 0.5 (1e-2 / 5e-3 absolute; about 3x margin);
// and they must differ (the 16-bit path ran). N replicas against 1 in bf16:
// every operand is rounded elementwise, the same on every split, so they
// differ only as float32 sums in other orders do, plus the rare activation
// that float32 noise (~1e-7 relative) moves across a bf16 rounding boundary
// (probability ~1e-7 / 2^-8 per element, one bf16 unit when it happens):
// simulated at most 5.4e-4 relative; 5e-3 (floor 1e-2) for cuBLAS's other
// summation orders at other row counts.
// The checkpoint of a bf16 run is float32 and a CPU group loads it.
TEST_CASE("bf16 and fp16 mixed precision: N replicas as 1, near float32, float32 checkpoints") {
  const char* json = R"({
    "seed": 2, "input": {"shape": [12]},
    "layers": [
      {"type": "linear", "out_features": 64}, {"type": "relu"},
      {"type": "linear", "out_features": 32}, {"type": "tanh"},
      {"type": "linear", "out_features": 5}
    ],
    "loss": {"type": "cross_entropy"}})";
  auto run = [&](const std::string& devices, int precision, std::vector<float>* losses) {
    Session s(json, devices, kSgd);
    dp_status st = dp_group_set_option(s.group, DP_GROUP_PRECISION, precision);
    REQUIRE_MESSAGE(st == DP_OK, "DP_GROUP_PRECISION " << precision << " on " << devices << ": " << last(st));
    for (int k = 0; k < 10; ++k) {
      float loss = 0;
      DP_REQUIRE_OK(s.step(12, k, &loss));
      if (losses) losses->push_back(loss);
    }
    return params_of(s.model);
  };
  std::vector<float> cpu_losses, l1, l3;
  const std::vector<float> cpu = run("cpu:0", DP_PRECISION_FP32, &cpu_losses);
  for (int p : {DP_PRECISION_BF16, DP_PRECISION_FP16}) {
    const std::string what = p == DP_PRECISION_BF16 ? "bf16" : "fp16";
    progress("mixed precision: " + what);
    l1.clear(), l3.clear();
    const std::vector<float> one = run("cuda:0", p, &l1), three = run(cuda_devices(3), p, &l3);
    CHECK_MESSAGE(one != cpu, what << ": the parameters equal float32's bit for bit: the 16-bit path did not run");
    expect_close(one, cpu, what + " on cuda:0 against float32 on the CPU: parameters after 10 steps",
                 p == DP_PRECISION_BF16 ? 2e-2 : 1e-2, 0.5);
    expect_close(l1, cpu_losses, what + ": losses against float32's", 2e-2, 1e-2);
    expect_close(three, one, what + ": 3 replicas against 1, parameters after 10 steps", 5e-3, 1e-2);
  }
  // A bf16 run's checkpoint: float32, loaded by a CPU group as it is.
  namespace fs = std::filesystem;
  fs::path path = fs::temp_directory_path() / ("dp_bf16_ckpt_" + std::to_string(getpid()) + ".safetensors");
  Session a(json, "cuda:0", kSgd);
  DP_REQUIRE_OK(dp_group_set_option(a.group, DP_GROUP_PRECISION, DP_PRECISION_BF16));
  float loss = 0;
  for (int k = 0; k < 3; ++k) DP_REQUIRE_OK(a.step(12, k, &loss));
  DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), a.group, a.opt, nullptr, nullptr));
  Session b(json, "cpu:0", kSgd);
  DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), b.group, b.opt, nullptr));
  CHECK(params_of(b.model) == params_of(a.model));
  DP_REQUIRE_OK(b.step(12, 3, &loss));
  fs::remove(path);
}

TEST_CASE("DP_GROUP_CUDNN_BENCHMARK: timed convolution algorithms train as the CPU does") {
  progress("cudnn benchmark, CNN, cuda:0, SGD, 5 steps");
  Session gpu(kCnn, "cuda:0", kSgd), cpu(kCnn, "cpu:0", kSgd);
  DP_REQUIRE_OK(dp_group_set_option(gpu.group, DP_GROUP_CUDNN_BENCHMARK, 1));
  CHECK(dp_group_set_option(gpu.group, DP_GROUP_CUDNN_BENCHMARK, 2) == DP_ERR_INVALID_ARGUMENT);
  const int64_t batches[] = {10, 10, 7, 10, 10};  // a new batch size is timed again
  for (int k = 0; k < 5; ++k) {
    float a = 0, b = 0;
    DP_REQUIRE_OK(cpu.step(batches[k], k, &a));
    dp_status st = gpu.step(batches[k], k, &b);
    INFO("step " << k << ": " << last(st));
    REQUIRE(st == DP_OK);
  }
  expect_close(params_of(gpu.model), params_of(cpu.model), "cudnn benchmark: parameters after the steps");
}

// ---------------------------------------------------------- pinned memory --

TEST_CASE("pinned batches train exactly as pageable ones, and a group's changed weights reach the GPU") {
  progress("pinned memory");
  Session a(kMlp, "cuda:0,cuda:0", kSgd), b(kMlp, "cuda:0,cuda:0", kSgd);
  for (int k = 0; k < 3; ++k) {
    dp_tensor* x = a.input(12, k);
    dp_tensor* y = a.target(12, k);
    float la = 0, lb = 0;
    DP_REQUIRE_OK(dp_group_train_step(a.group, a.opt, x, y, &la));
    DP_REQUIRE_OK(dp_tensor_pin_memory(x));  // the same values, now page-locked
    DP_REQUIRE_OK(dp_tensor_pin_memory(y));
    DP_REQUIRE_OK(dp_group_train_step(b.group, b.opt, x, y, &lb));
    CHECK(la == lb);
    dp_tensor_destroy(x);
    dp_tensor_destroy(y);
  }
  CHECK(params_of(a.model) == params_of(b.model));
  // Weights written on the host go up before the next step: b takes a's.
  std::vector<float> p = params_of(a.model);
  for (float& v : p) v *= 0.5f;
  DP_REQUIRE_OK(dp_model_set_parameters(a.model, p.data(), static_cast<int64_t>(p.size())));
  DP_REQUIRE_OK(dp_model_set_parameters(b.model, p.data(), static_cast<int64_t>(p.size())));
  float la = 0, lb = 0;
  DP_REQUIRE_OK(a.step(12, 7, &la));
  DP_REQUIRE_OK(b.step(12, 7, &lb));
  CHECK(la == lb);
  CHECK(params_of(a.model) == params_of(b.model));
}

// Weights written on the host after training must not be overwritten by the
// GPU's older copy when a device-side call (zero_grad, optimizer_step) comes
// before the next run: each uploads the host's first.
TEST_CASE("host-written weights survive zero_grad and optimizer_step on CUDA") {
  progress("host writes, then zero_grad / optimizer_step");
  Session a(kMlp, "cuda:0", kSgd);
  float loss = 0;
  DP_REQUIRE_OK(a.step(12, 0, &loss));  // the GPU holds newer values than the host now
  std::vector<float> p = params_of(a.model);
  for (float& v : p) v *= 0.5f;
  DP_REQUIRE_OK(dp_model_set_parameters(a.model, p.data(), static_cast<int64_t>(p.size())));
  DP_REQUIRE_OK(dp_group_zero_grad(a.group));
  CHECK(params_of(a.model) == p);
  dp_tensor* x = a.input(12, 1);
  dp_tensor* out = nullptr;
  DP_REQUIRE_OK(dp_group_forward(a.group, x, &out));
  CHECK(params_of(a.model) == p);
  // The CPU computes the same forward from the same weights, at the same
  // step (a training forward's dropout masks are keyed by it): one step first.
  Session c(kMlp, "cpu:0", kSgd);
  DP_REQUIRE_OK(c.step(12, 0, &loss));
  DP_REQUIRE_OK(dp_model_set_parameters(c.model, p.data(), static_cast<int64_t>(p.size())));
  dp_tensor* cpu_out = nullptr;
  DP_REQUIRE_OK(dp_group_forward(c.group, x, &cpu_out));
  expect_close(tensor_data(out), tensor_data(cpu_out), "forward after set_parameters and zero_grad");
  // optimizer_step after a host write steps from the written weights: with
  // zero gradients (a backward of zeros: with no backward since zero_grad a
  // step is none) and fresh momentum, SGD leaves them as they are.
  DP_REQUIRE_OK(dp_group_zero_grad(a.group));
  dp_tensor* out2 = nullptr;
  DP_REQUIRE_OK(dp_group_forward(a.group, x, &out2));
  dp_tensor* zeros = make_f32(a.ctx, std::vector<float>(static_cast<size_t>(12 * kClasses), 0.0f), {12, kClasses});
  DP_REQUIRE_OK(dp_group_backward(a.group, zeros));
  for (float& v : p) v *= 0.5f;
  DP_REQUIRE_OK(dp_model_set_parameters(a.model, p.data(), static_cast<int64_t>(p.size())));
  dp_optimizer* plain = nullptr;
  DP_REQUIRE_OK(dp_optimizer_create(a.group, R"({"type": "sgd", "lr": 0.1})", &plain));
  DP_REQUIRE_OK(dp_optimizer_step(plain));
  CHECK(params_of(a.model) == p);
  dp_optimizer_destroy(plain);
  dp_tensor_destroy(out2);
  dp_tensor_destroy(zeros);
  dp_tensor_destroy(out);
  dp_tensor_destroy(cpu_out);
  dp_tensor_destroy(x);
}

// Two GPU groups on one model take turns: each starts from the other's
// results (the model's device copy is the group that ran last), as two CPU
// groups on one model do.
TEST_CASE("two CUDA groups on one model: each trains from the other's results") {
  progress("two CUDA groups on one model");
  Session gpu(kMlp, "cuda:0", kSgd), cpu(kMlp, "cpu:0", kSgd);
  const std::vector<float> p0 = params_of(gpu.model);
  REQUIRE(params_of(cpu.model) == p0);
  dp_group* g2 = nullptr;
  dp_optimizer* o2 = nullptr;
  dp_group* c2 = nullptr;
  dp_optimizer* co2 = nullptr;
  DP_REQUIRE_OK(dp_group_create(gpu.model, "cuda:0", &g2));
  DP_REQUIRE_OK(dp_optimizer_create(g2, kSgd, &o2));
  DP_REQUIRE_OK(dp_group_create(cpu.model, "cpu:0", &c2));
  DP_REQUIRE_OK(dp_optimizer_create(c2, kSgd, &co2));
  float loss = 0;
  for (int k = 0; k < 4; ++k) {
    CAPTURE(k);
    // Even steps on the first groups, odd ones on the second.
    if (k % 2 == 0) {
      DP_REQUIRE_OK(gpu.step(12, k, &loss));
      DP_REQUIRE_OK(cpu.step(12, k, &loss));
    } else {
      for (auto [g, o, s] : {std::tuple{g2, o2, &gpu}, std::tuple{c2, co2, &cpu}}) {
        dp_tensor* x = s->input(12, k);
        dp_tensor* y = s->target(12, k);
        DP_REQUIRE_OK(dp_group_train_step(g, o, x, y, &loss));
        dp_tensor_destroy(x);
        dp_tensor_destroy(y);
      }
    }
    CHECK(params_of(gpu.model) != p0);
    expect_close(params_of(gpu.model), params_of(cpu.model), "parameters after step " + std::to_string(k));
  }
  dp_optimizer_destroy(o2);
  dp_group_destroy(g2);
  // The first group goes on from the second's last step.
  DP_REQUIRE_OK(gpu.step(12, 4, &loss));
  DP_REQUIRE_OK(cpu.step(12, 4, &loss));
  expect_close(params_of(gpu.model), params_of(cpu.model), "parameters after the second group is gone");
  dp_optimizer_destroy(co2);
  dp_group_destroy(c2);
}

// ----------------------------------------------------------- steady state --

TEST_CASE("steady-state training on CUDA calls neither cudaMalloc nor cudaFree") {
  for (int n : {1, 2}) {
    progress("steady state, " + std::to_string(n) + " replica(s)");
    Session s(kCnn, cuda_devices(n), kAdam);
    float loss = 0;
    for (int k = 0; k < 3; ++k) DP_REQUIRE_OK(s.step(16, k, &loss));  // warm-up: buffers grow here
    dp_tensor* x = s.input(16, 5);
    dp_tensor* y = s.target(16, 5);
    long m0 = dp_test::cuda_mallocs(), f0 = dp_test::cuda_frees();
    for (int k = 0; k < 5; ++k) DP_REQUIRE_OK(dp_group_train_step(s.group, s.opt, x, y, &loss));
    long m1 = dp_test::cuda_mallocs(), f1 = dp_test::cuda_frees();
    // The first evaluations may allocate their own buffers; after them, steps
    // and evaluations allocate nothing.
    float eval = 0;
    int64_t correct = 0;
    DP_REQUIRE_OK(dp_group_evaluate(s.group, x, y, &eval, &correct));
    DP_REQUIRE_OK(dp_group_evaluate(s.group, x, y, &eval, &correct));
    long m2 = dp_test::cuda_mallocs(), f2 = dp_test::cuda_frees();
    for (int k = 0; k < 3; ++k) DP_REQUIRE_OK(dp_group_train_step(s.group, s.opt, x, y, &loss));
    DP_REQUIRE_OK(dp_group_evaluate(s.group, x, y, &eval, &correct));
    long m3 = dp_test::cuda_mallocs(), f3 = dp_test::cuda_frees();
    MESSAGE(n << " replica(s): cudaMalloc calls: " << m0 << " up to the end of warm-up, +" << m1 - m0
              << " over 5 steps, +" << m2 - m1 << " over the first 2 evaluations, +" << m3 - m2
              << " over 3 more steps and an evaluation; cudaFree: " << f0 << ", +" << f1 - f0 << ", +" << f2 - f1
              << ", +" << f3 - f2);
    CHECK_MESSAGE(m1 - m0 == 0, "cudaMalloc called " << m1 - m0 << " time(s) in 5 steps after warm-up");
    CHECK_MESSAGE(f1 - f0 == 0, "cudaFree called " << f1 - f0 << " time(s) in 5 steps after warm-up");
    CHECK_MESSAGE(m3 - m2 == 0, "cudaMalloc called " << m3 - m2 << " time(s) in steps and evaluation after warm-up");
    CHECK_MESSAGE(f3 - f2 == 0, "cudaFree called " << f3 - f2 << " time(s) in steps and evaluation after warm-up");
    dp_tensor_destroy(x);
    dp_tensor_destroy(y);
  }
}

TEST_CASE("a target class out of range on CUDA: an error, not a crash; the group stays usable") {
  // Last: a device-side fault here would poison the CUDA context for what follows.
  progress("errors: target out of range");
  Session s(kMlp, "cuda:0", kSgd);
  float loss = 0;
  std::vector<float> before = params_of(s.model);
  dp_tensor* x = s.input(4, 0);
  dp_tensor* t = make_i64(s.ctx, {0, 1, 7, 2}, {4});
  dp_status st = dp_group_train_step(s.group, s.opt, x, t, &loss);
  // The CPU says DP_ERR_INVALID_ARGUMENT; a GPU finds it in a kernel and
  // gives the row a NaN loss instead (ops/loss.cu): DP_ERR_NUMERIC.
  MESSAGE("target 7 of 5 classes on cuda:0: " << last(st));
  CHECK_MESSAGE((st == DP_ERR_INVALID_ARGUMENT || st == DP_ERR_NUMERIC), "target 7 of 5 classes: " << last(st));
  CHECK_MESSAGE(params_of(s.model) == before, "the failed step changed the parameters");
  std::vector<float> p0 = params_of(s.model);
  st = s.step(4, 1, &loss);
  CHECK_MESSAGE(st == DP_OK, "the step after: " << last(st));
  CHECK(params_of(s.model) != p0);
  dp_tensor_destroy(x);
  dp_tensor_destroy(t);
}

int main(int argc, char** argv) {
  int count = 0;
  const char* why = nullptr;
  dp_status st = dp_device_count("cuda", &count, &why);
  if (st != DP_OK) {
    std::printf("cuda_group: FAIL: dp_device_count(\"cuda\") returned %s: %s\n", dp_status_name(st), dp_last_error());
    return 1;
  }
  if (count <= 0) {
    std::printf("cuda_group: SKIP: %s\n", why && *why ? why : "no CUDA device (no reason given)");
    return 77;
  }
  int cpus = 0;
  st = dp_device_count("cpu", &cpus, nullptr);
  std::printf("cuda_group: dp %s, %d CUDA device(s), %d CPU device(s) (%s)\n", dp_version(), count, cpus,
              dp_status_name(st));
  std::fflush(stdout);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
