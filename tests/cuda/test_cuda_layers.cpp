// Every built-in layer, both losses and the arg-max count: the CUDA op
// (backends/cuda/ops) against the CPU layer on the same random inputs,
// parameters, running statistics, output gradient and starting parameter
// gradients (non-zero: backward must ADD into them). Compared: the output,
// every input gradient, the parameter gradients and batch-norm's per-replica
// statistics; at three batch sizes in a row (4, 9, 3: buffers grow, then
// descriptors are set for a smaller batch); then a second identical step at
// the largest batch must call cudaMalloc / cudaFree not once.
//
// Exits 77 (skipped) when the build has no CUDA backend or no GPU is usable.
// Progress goes to stdout, one line per case, so a crash names its case.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/cuda/device.h"
#include "common.h"
#include "cuda_malloc_counter.h"

#ifdef DP_HAVE_CUDA
#include <cuda_runtime.h>

#include <atomic>
#include <limits>
#include <map>

#include "backends/cuda/ops/ops.h"
#include "plugin/plugin.h"

using namespace dp;
using namespace dp::test;

namespace {

// ---------------------------------------------------------------- device --

// Forwards to the stream's caching allocator, counting calls; installed as
// the stream's CudaCtx::alloc and as LayerIO::alloc, so every device tensor
// of these tests and every op-internal allocation goes through it.
class CountingAllocator final : public Allocator {
 public:
  explicit CountingAllocator(Allocator* inner) : inner_(inner) {}
  void* allocate(size_t bytes) override {
    calls.fetch_add(1);
    return inner_->allocate(bytes);
  }
  void release(void* p, size_t bytes) override { inner_->release(p, bytes); }
  std::atomic<long> calls{0};

 private:
  Allocator* inner_;
};

struct Env {
  int device = 0;
  CudaStream* stream = nullptr;        // one replica's stream, handles and allocator
  CountingAllocator* alloc = nullptr;  // wraps the stream's allocator
};
Env g_env;

#define CU(call)                                                                                        \
  do {                                                                                                  \
    cudaError_t cu_e_ = (call);                                                                         \
    REQUIRE_MESSAGE(cu_e_ == cudaSuccess, #call << " failed: " << std::string(cudaGetErrorName(cu_e_)) << ": "       \
                                                << std::string(cudaGetErrorString(cu_e_)));                          \
  } while (0)

void device_sync() {
  g_env.stream->synchronize();  // throws dp::Error with CUDA's message
  CU(cudaDeviceSynchronize());
  CU(cudaGetLastError());
}

Tensor dev_tensor() { return Tensor(g_env.alloc); }

// A copy's failure names its cause: an error left by earlier work (reported
// by the next runtime call), or a pointer that is not this device's memory.
void expect_device_pointer(const void* p, const char* what) {
  CU(cudaGetLastError());  // an earlier call's error, not this copy's
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  cudaGetLastError();
  REQUIRE_MESSAGE((e == cudaSuccess && a.type == cudaMemoryTypeDevice && a.device == g_env.device),
                  what << " " << p << " is not cuda:" << g_env.device << " memory (cudaPointerGetAttributes: "
                       << std::string(cudaGetErrorName(e)) << ", type " << int(a.type) << ", device " << a.device
                       << ")");
}

// A device copy of a host tensor (same dtype and shape).
Tensor to_device(const Tensor& h) {
  Tensor d = dev_tensor();
  d.resize(h.dtype(), h.shape());
  if (h.bytes()) CU(cudaMemcpy(d.data(), h.data(), h.bytes(), cudaMemcpyHostToDevice));
  CU(cudaDeviceSynchronize());  // a pageable copy may return before its DMA is done
  return d;
}

// Overwrites (or first allocates) a flat device float array.
void upload(Tensor& d, const std::vector<float>& v) {
  if (v.empty()) return;
  // (a tensor never resized has shape [] and numel 1, but no memory)
  if (d.shape() != Shape{static_cast<int64_t>(v.size())}) d.resize(DP_F32, Shape{static_cast<int64_t>(v.size())});
  expect_device_pointer(d.data(), "upload's destination");
  CU(cudaMemcpy(d.data(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  CU(cudaDeviceSynchronize());
}

std::vector<float> to_host(const Tensor& d) {
  device_sync();
  std::vector<float> v(static_cast<size_t>(d.numel()));
  REQUIRE(d.dtype() == DP_F32);
  if (!v.empty()) CU(cudaMemcpy(v.data(), d.data(), v.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

std::vector<float> host_vec(const Tensor& h) { return std::vector<float>(h.f32(), h.f32() + h.numel()); }
float* fptr(Tensor& d) { return d.numel() ? d.f32() : nullptr; }

// ------------------------------------------------------------ comparison --

struct Tol {
  double rel, abs;  // |cuda - cpu| <= abs * max(1, max|cpu|) + rel * max(|cuda|, |cpu|)
};
const Tol kElementwise{1e-5, 1e-5};
const Tol kHeavy{1e-4, 1e-4};  // conv, linear, batch norm: sums over many terms, other orders

// One CHECK per tensor, naming the worst element, so a failure reads as
// "conv2d {...} batch 9: input gradient: 3 of 1800 differ; worst [17]: ...".
void compare(const std::string& what, const std::vector<float>& got, const std::vector<float>& want, Tol tol) {
  if (got.size() != want.size()) {
    FAIL_CHECK(what << ": CUDA gave " << got.size() << " values, the CPU " << want.size());
    return;
  }
  double maxref = 0;
  for (float w : want) maxref = std::fmax(maxref, std::fabs(w));
  const double atol = tol.abs * std::fmax(1.0, maxref);
  auto allowed = [&](size_t i) { return atol + tol.rel * std::fmax(std::fabs(got[i]), std::fabs(want[i])); };
  double worst = 0;
  size_t at = 0, bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double diff = std::fabs(double(got[i]) - double(want[i]));
    bool ok = diff <= allowed(i);  // false for NaN
    if (!ok) ++bad;
    double excess = ok ? (allowed(i) > 0 ? diff / allowed(i) : 0.0) : (std::isnan(diff) ? INFINITY : 1.0 + diff);
    if (excess > worst) worst = excess, at = i;
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " differ; worst [" << at << "]: cuda "
                               << got[at] << " vs cpu " << want[at] << " (|diff| "
                               << std::fabs(double(got[at]) - double(want[at])) << ", allowed " << allowed(at) << ")");
}

void progress(const std::string& line) {
  std::printf("cuda_layers: %s\n", line.c_str());
  std::fflush(stdout);
}

// ----------------------------------------------------------------- cases --

struct Case {
  nlohmann::json layer;
  std::vector<Shape> samples;  // per-sample input shapes
  Tol tol = kElementwise;
  bool training = true;
  int index = 3;               // the layer's position (keys dropout)
  std::vector<bool> need;      // inputs that need a gradient (empty: all)
  float lo = -2.f, hi = 2.f;   // input values
  bool bn = false;             // batch norm: params in [0.5, 1.5], running stats moved off their init
  bool dropout = false;        // the mask must be the CPU's exactly
  const Registry* types = nullptr;  // where the layer type comes from (plugins); null: the built-ins
};

Case make(nlohmann::json j, std::vector<Shape> s, Tol t = kElementwise) {
  Case c;
  c.layer = std::move(j);
  c.samples = std::move(s);
  c.tol = t;
  return c;
}

// The CUDA side of one layer: the op and one replica's device memory.
struct CudaSide {
  std::unique_ptr<CudaOp> op;
  Tensor params = dev_tensor(), grads = dev_tensor(), buffers = dev_tensor(), stats = dev_tensor();
  std::vector<Tensor> scratch, in, gin;
  Tensor out = dev_tensor(), gout = dev_tensor();
  RunCtx ctx;

  LayerIO io() {
    LayerIO x;
    for (auto& t : in) x.in.push_back(&t);
    x.out = &out;
    x.params = params.numel() ? params.f32() : nullptr;
    x.grads = fptr(grads);
    x.buffers = buffers.numel() ? buffers.f32() : nullptr;
    x.stats = fptr(stats);
    x.scratch = &scratch;
    x.alloc = g_env.alloc;
    return x;
  }
  void forward() {
    LayerIO x = io();
    op->forward(ctx, x);
  }
  void backward(const std::vector<bool>& need) {
    LayerIO x = io();
    x.gout = &gout;
    for (size_t i = 0; i < gin.size(); ++i) x.gin.push_back(need.empty() || need[i] ? &gin[i] : nullptr);
    op->backward(ctx, x);
  }
};

std::string describe(const Case& c) {
  std::string s = c.layer.dump() + " in";
  for (const auto& sh : c.samples) s += " " + sh.str();
  return s + (c.training ? " train" : " eval");
}

void run_case_unguarded(const Case& c) {
  const std::string name = describe(c);
  progress(name);
  auto l = c.types ? make_layer(*c.types, c.layer, c.index) : make_layer(c.layer, c.index);
  Harness h(*l, c.samples, 7);
  if (c.bn) {
    h.randomize_params(3, 0.5f, 1.5f);
    for (size_t i = 0; i < h.buffers.size(); ++i)
      h.buffers[i] = i < h.buffers.size() / 2 ? 0.3f * float(i) - 0.2f : 0.5f + 0.25f * float(i);
  }
  h.ctx.training = c.training;
  h.ctx.seed = 42;
  h.ctx.step = 5;
  h.ctx.sample_offset = 10;

  CudaSide d;
  d.op = make_cuda_op(*l);
  if (!d.op) {
    FAIL_CHECK(name << ": make_cuda_op gave no op for type '" << l->type << "'");
    return;
  }
  d.ctx = h.ctx;
  d.ctx.cuda = g_env.stream->ctx();
  d.ctx.cuda_device = g_env.device;
  d.ctx.cuda_stream = g_env.stream->ctx()->stream;
  upload(d.params, h.params);
  upload(d.buffers, h.buffers);
  upload(d.grads, std::vector<float>(h.grads.size(), 0.f));
  upload(d.stats, std::vector<float>(h.stats.size(), 0.f));
  const size_t nin = c.samples.size();
  for (size_t k = 0; k < nin; ++k) d.in.push_back(dev_tensor()), d.gin.push_back(dev_tensor());

  auto one_step = [&](int64_t batch, uint64_t seed, bool compare_now) {
    std::vector<Tensor> xs;
    for (size_t k = 0; k < nin; ++k)
      xs.push_back(random_tensor(Shape::batched(batch, c.samples[k]), seed + 10 * k, c.lo, c.hi));
    Tensor gout = random_tensor(Shape::batched(batch, h.out_sample), seed + 1);
    std::vector<float> g0(h.grads.size());
    fill_uniform(g0.data(), static_cast<int64_t>(g0.size()), seed + 2, -0.5f, 0.5f);
    // CPU
    std::vector<const Tensor*> cin;
    for (auto& x : xs) cin.push_back(&x);
    h.grads = g0;
    std::fill(h.stats.begin(), h.stats.end(), 0.f);
    h.forward(cin);
    h.backward(cin, gout, c.need);
    // CUDA
    for (size_t k = 0; k < nin; ++k) {
      if (d.in[k].shape() != xs[k].shape()) d.in[k].resize(DP_F32, xs[k].shape());
      CU(cudaMemcpy(d.in[k].data(), xs[k].data(), xs[k].bytes(), cudaMemcpyHostToDevice));
    }
    if (d.gout.shape() != gout.shape()) d.gout.resize(DP_F32, gout.shape());
    CU(cudaMemcpy(d.gout.data(), gout.data(), gout.bytes(), cudaMemcpyHostToDevice));
    upload(d.grads, g0);
    upload(d.stats, std::vector<float>(h.stats.size(), 0.f));
    d.forward();
    d.backward(c.need);
    device_sync();
    if (!compare_now) return;
    const std::string at = name + ", batch " + std::to_string(batch);
    CHECK_MESSAGE(d.out.shape() == h.out.shape(), at << ": output shape " << d.out.shape().str() << ", CPU "
                                                     << h.out.shape().str());
    if (d.out.shape() != h.out.shape()) return;
    std::vector<float> out = to_host(d.out), want = host_vec(h.out);
    compare(at + ": output", out, want, c.tol);
    if (c.dropout) {  // the same elements dropped, exactly
      size_t differ = 0, dropped = 0;
      for (size_t i = 0; i < out.size(); ++i) differ += (out[i] == 0.f) != (want[i] == 0.f), dropped += want[i] == 0.f;
      CHECK_MESSAGE(differ == 0, at << ": dropout mask: " << differ << " of " << out.size()
                                    << " elements dropped on one side only (CPU dropped " << dropped << ")");
      if (c.training) CHECK_MESSAGE(dropped > 0, at << ": the CPU dropped nothing: the test data is too small");
    }
    for (size_t k = 0; k < nin; ++k) {
      if (!(c.need.empty() || c.need[k])) continue;
      const std::string gk = at + ": input " + std::to_string(k) + " gradient";
      CHECK_MESSAGE(d.gin[k].shape() == xs[k].shape(), gk << " shape " << d.gin[k].shape().str() << ", input "
                                                          << xs[k].shape().str());
      if (d.gin[k].shape() == xs[k].shape()) compare(gk, to_host(d.gin[k]), host_vec(h.gin[k]), c.tol);
    }
    if (!h.grads.empty()) compare(at + ": parameter gradients (accumulated onto non-zero)", to_host(d.grads), h.grads, c.tol);
    if (!h.stats.empty()) compare(at + ": batch statistics", to_host(d.stats), h.stats, c.tol);
    if (!h.buffers.empty()) compare(at + ": running statistics (must be left alone)", to_host(d.buffers), h.buffers, Tol{0, 0});
  };

  one_step(4, 100, true);
  one_step(9, 200, true);
  one_step(3, 300, true);

  // Steady state: two identical steps at the largest batch seen; the second
  // may not touch cudaMalloc / cudaFree, nor move any tensor.
  one_step(9, 400, false);
  std::vector<const void*> before;
  for (auto& t : d.scratch) before.push_back(t.data());
  before.push_back(d.out.data());
  for (auto& t : d.gin) before.push_back(t.data());
  size_t nscratch = d.scratch.size();
  size_t free0 = 0, free1 = 0, total = 0;
  CU(cudaMemGetInfo(&free0, &total));
  long m0 = dp_test::cuda_mallocs(), f0 = dp_test::cuda_frees(), a0 = g_env.alloc->calls.load();
  one_step(9, 400, false);
  long m1 = dp_test::cuda_mallocs(), f1 = dp_test::cuda_frees(), a1 = g_env.alloc->calls.load();
  CU(cudaMemGetInfo(&free1, &total));
  std::vector<const void*> after;
  for (auto& t : d.scratch) after.push_back(t.data());
  after.push_back(d.out.data());
  for (auto& t : d.gin) after.push_back(t.data());
  CHECK_MESSAGE(m1 - m0 == 0, name << ": a second identical step called cudaMalloc " << m1 - m0 << " time(s)");
  CHECK_MESSAGE(f1 - f0 == 0, name << ": a second identical step called cudaFree " << f1 - f0 << " time(s)");
  CHECK_MESSAGE(free1 == free0, name << ": free device memory fell by " << (long long)free0 - (long long)free1
                                     << " bytes over a second identical step (cudaMalloc calls in it: " << m1 - m0
                                     << "; memory a library takes outside cudaMalloc shows only here)");
  CHECK_MESSAGE(d.scratch.size() == nscratch, name << ": scratch grew in a second identical step");
  CHECK_MESSAGE(before == after, name << ": a tensor was reallocated in a second identical step");
  if (a1 != a0)  // through the caching allocator (no cudaMalloc): allowed, but worth knowing
    MESSAGE(name << ": note: " << a1 - a0 << " allocator call(s) in a second identical step (served from its cache)");
}

// One case; a dp::Error (an op's CUDA failure, an unsupported configuration)
// fails this case only, with its message, and the next case runs.
void run_case(const Case& c) {
  try {
    run_case_unguarded(c);
  } catch (const dp::Error& e) {
    FAIL_CHECK(describe(c) << ": dp::Error " << std::string(dp_status_name(e.status())) << ": " << std::string(e.what()));
    cudaDeviceSynchronize();
  } catch (const std::exception& e) {
    FAIL_CHECK(describe(c) << ": exception: " << std::string(e.what()));
    cudaDeviceSynchronize();
  }
}

}  // namespace

// ----------------------------------------------------------------- tests --

TEST_CASE("cuda linear: rank 2 and rank 3 input, with and without bias, input needing no gradient") {
  run_case(make({{"type", "linear"}, {"out_features", 7}}, {Shape{12}}, kHeavy));
  run_case(make({{"type", "linear"}, {"out_features", 5}, {"bias", false}}, {Shape{6}}, kHeavy));
  run_case(make({{"type", "linear"}, {"out_features", 5}}, {Shape{3, 4}}, kHeavy));  // rank 3: [N, 3, 4]
  run_case(make({{"type", "linear"}, {"out_features", 96}}, {Shape{130}}, kHeavy));  // not multiples of anything
  Case c = make({{"type", "linear"}, {"out_features", 4}}, {Shape{9}}, kHeavy);
  c.need = {false};  // a model's first layer: no input gradient, parameter gradients still
  run_case(c);
}

TEST_CASE("cuda conv2d: stride, padding, dilation, groups, rectangular kernels, no bias") {
  struct Cfg {
    int64_t cin, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups;
    bool bias;
    int64_t H, W;
  };
  const Cfg cfgs[] = {
      {2, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, true, 5, 5},     // same padding
      {2, 2, 3, 3, 2, 2, 1, 1, 2, 2, 1, true, 7, 6},     // stride, padding, dilation
      {4, 6, 3, 2, 2, 1, 0, 1, 1, 1, 2, false, 5, 4},    // groups, rectangular, no bias
      {4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4, true, 6, 6},     // depthwise
      {3, 2, 1, 1, 1, 1, 0, 0, 1, 1, 1, false, 2, 3},    // pointwise, no bias
      {8, 16, 1, 1, 2, 2, 0, 0, 1, 1, 1, false, 8, 8},   // ResNet's strided shortcut
      {2, 2, 2, 2, 3, 3, 1, 0, 1, 1, 2, true, 5, 5},     // stride > kernel
      {16, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, false, 12, 12},  // large enough for cuDNN's fast algorithms
  };
  for (const Cfg& c : cfgs) {
    nlohmann::json j{{"type", "conv2d"}, {"in_channels", c.cin}, {"out_channels", c.cout}, {"kernel_size", {c.kh, c.kw}},
                     {"stride", {c.sh, c.sw}}, {"padding", {c.ph, c.pw}}, {"dilation", {c.dh, c.dw}},
                     {"groups", c.groups}, {"bias", c.bias}};
    run_case(make(j, {Shape{c.cin, c.H, c.W}}, kHeavy));
  }
  Case first = make({{"type", "conv2d"}, {"out_channels", 4}, {"kernel_size", 3}, {"padding", 1}}, {Shape{3, 6, 6}}, kHeavy);
  first.need = {false};
  run_case(first);
}

TEST_CASE("cuda max_pool2d: stride, padding, dilation, ceil_mode") {
  struct Cfg {
    int64_t k, s, p, d;
    bool ceil;
    int64_t H, W;
  };
  const Cfg cfgs[] = {
      {2, 2, 0, 1, false, 4, 6}, {3, 2, 1, 1, true, 5, 6}, {3, 2, 1, 1, false, 5, 6},
      {2, 1, 1, 2, false, 5, 5}, {3, 3, 1, 1, true, 7, 8}, {2, 2, 0, 1, true, 5, 5},
      {3, 2, 1, 2, true, 9, 8},
  };
  for (const Cfg& c : cfgs)
    run_case(make({{"type", "max_pool2d"}, {"kernel_size", c.k}, {"stride", c.s}, {"padding", c.p},
                   {"dilation", c.d}, {"ceil_mode", c.ceil}},
                  {Shape{3, c.H, c.W}}));
}

TEST_CASE("cuda avg_pool2d: count_include_pad both ways, ceil_mode") {
  struct Cfg {
    int64_t k, s, p;
    bool ceil, include;
    int64_t H, W;
  };
  const Cfg cfgs[] = {
      {2, 2, 0, false, true, 4, 4}, {3, 2, 1, false, true, 5, 6}, {3, 2, 1, false, false, 5, 6},
      {3, 2, 1, true, true, 6, 6},  {3, 2, 1, true, false, 6, 6}, {2, 3, 1, true, true, 7, 5},
      {2, 2, 0, true, false, 5, 5}, {2, 1, 0, false, true, 4, 4},
  };
  for (const Cfg& c : cfgs)
    run_case(make({{"type", "avg_pool2d"}, {"kernel_size", c.k}, {"stride", c.s}, {"padding", c.p},
                   {"ceil_mode", c.ceil}, {"count_include_pad", c.include}},
                  {Shape{3, c.H, c.W}}));
}

TEST_CASE("cuda global_avg_pool") {
  run_case(make({{"type", "global_avg_pool"}}, {Shape{5, 4, 3}}));
  run_case(make({{"type", "global_avg_pool"}}, {Shape{16, 8, 8}}));
}

TEST_CASE("cuda batch norm: 1d on [N, C] and [N, C, L], 2d, training and eval, affine and tracking off") {
  const std::pair<nlohmann::json, Shape> cfgs[] = {
      {{{"type", "batch_norm1d"}}, Shape{6}},
      {{{"type", "batch_norm"}}, Shape{3}},
      {{{"type", "batch_norm1d"}}, Shape{3, 5}},
      {{{"type", "batch_norm2d"}}, Shape{4, 3, 5}},
      {{{"type", "batch_norm2d"}, {"eps", 1e-3}, {"momentum", 0.2}}, Shape{2, 6, 6}},
      {{{"type", "batch_norm2d"}, {"affine", false}}, Shape{3, 4, 4}},
      {{{"type", "batch_norm1d"}, {"track_running_stats", false}}, Shape{4}},
      {{{"type", "batch_norm2d"}, {"track_running_stats", false}}, Shape{2, 3, 3}},
  };
  for (const auto& [j, s] : cfgs)
    for (bool training : {true, false}) {
      Case c = make(j, {s}, kHeavy);
      c.training = training;
      c.bn = true;
      run_case(c);
    }
}

TEST_CASE("cuda activations: relu, leaky_relu, sigmoid, tanh, gelu (erf and tanh)") {
  const nlohmann::json acts[] = {
      {{"type", "relu"}},
      {{"type", "leaky_relu"}},
      {{"type", "leaky_relu"}, {"negative_slope", 0.2}},
      {{"type", "sigmoid"}},
      {{"type", "tanh"}},
      {{"type", "gelu"}},
      {{"type", "gelu"}, {"approximate", "none"}},
      {{"type", "gelu"}, {"approximate", "tanh"}},
  };
  for (const auto& j : acts) {
    Case c = make(j, {Shape{2, 3, 4}});
    c.lo = -4.f, c.hi = 4.f;
    run_case(c);
    run_case(make(j, {Shape{1000}}));
  }
}

TEST_CASE("cuda softmax: dim -1 and dim 1 of a rank-3 input, dim 2 of rank 4") {
  run_case(make({{"type", "softmax"}}, {Shape{10}}));
  run_case(make({{"type", "softmax"}, {"dim", -1}}, {Shape{3, 5}}));
  run_case(make({{"type", "softmax"}, {"dim", 1}}, {Shape{3, 5}}));
  run_case(make({{"type", "softmax"}, {"dim", 2}}, {Shape{3, 4, 2}}));
  Case big = make({{"type", "softmax"}}, {Shape{1000}});  // more than one block's worth of a row
  big.lo = -20.f, big.hi = 20.f;
  run_case(big);
}

TEST_CASE("cuda log_softmax: dim -1 and dim 1 of a rank-3 input, dim 2 of rank 4, a long row") {
  run_case(make({{"type", "log_softmax"}}, {Shape{10}}));
  run_case(make({{"type", "log_softmax"}, {"dim", 1}}, {Shape{3, 5}}));
  run_case(make({{"type", "log_softmax"}, {"dim", 2}}, {Shape{3, 4, 2}}));
  Case big = make({{"type", "log_softmax"}}, {Shape{1000}});
  big.lo = -20.f, big.hi = 20.f;
  run_case(big);
}

TEST_CASE("cuda dropout: training (the CPU's mask exactly) and eval") {
  for (double p : {0.5, 0.1, 0.0}) {
    Case c = make({{"type", "dropout"}, {"p", p}}, {Shape{3, 7}});
    c.dropout = p > 0;
    c.lo = 0.5f, c.hi = 1.5f;  // never 0: an output of 0 means dropped
    run_case(c);
  }
  Case big = make({{"type", "dropout"}, {"p", 0.3}}, {Shape{4099}});  // odd sizes: vectorised paths' tails
  big.dropout = true, big.lo = 0.5f, big.hi = 1.5f, big.index = 11;
  run_case(big);
  Case eval = make({{"type", "dropout"}, {"p", 0.5}}, {Shape{3, 7}});
  eval.training = false;
  run_case(eval);
}

TEST_CASE("cuda flatten, add (3 inputs), concat") {
  run_case(make({{"type", "flatten"}}, {Shape{2, 3, 4}}));
  run_case(make({{"type", "flatten"}, {"start_dim", 2}}, {Shape{2, 3, 4}}));
  run_case(make({{"type", "add"}}, {Shape{2, 3, 4}, Shape{2, 3, 4}}));
  run_case(make({{"type", "add"}}, {Shape{2, 3, 4}, Shape{2, 3, 4}, Shape{2, 3, 4}}));
  Case add_first = make({{"type", "add"}}, {Shape{5}, Shape{5}, Shape{5}});
  add_first.need = {false, true, true};
  run_case(add_first);
  run_case(make({{"type", "concat"}}, {Shape{1, 2}, Shape{2, 2}}));
  run_case(make({{"type", "concat"}, {"dim", 1}}, {Shape{2, 3, 3}, Shape{4, 3, 3}, Shape{1, 3, 3}}));
  run_case(make({{"type", "concat"}, {"dim", -1}}, {Shape{2, 1}, Shape{2, 3}}));
  run_case(make({{"type", "concat"}, {"dim", 2}}, {Shape{2, 3, 4}, Shape{2, 1, 4}}));
}

// ---------------------------------------------------------------- losses --

namespace {
void run_loss(const nlohmann::json& j, int64_t rows, int64_t classes, int64_t batch_total, int64_t offset) {
  const std::string name = j.dump() + " rows " + std::to_string(rows) + " of " + std::to_string(batch_total);
  progress(name);
  try {
    auto loss = make_loss(j);
    auto op = make_cuda_loss(*loss);
    REQUIRE_MESSAGE(op != nullptr, "make_cuda_loss gave nothing for '" << loss->type << "'");
    dp_dtype tdt = DP_F32;
    Shape tsample = loss->target_shape(Shape{classes}, &tdt);
    RunCtx ctx;
    ctx.batch_total = batch_total;
    ctx.sample_offset = offset;
    Tensor out = random_tensor(Shape{rows, classes}, 5, -4.f, 4.f);
    Tensor target;
    if (tdt == DP_I64) {
      std::vector<int64_t> t(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) t[r] = (r * 7 + 3) % classes;
      target = labels_of(t);
    } else {
      target = random_tensor(Shape::batched(rows, tsample), 6, 0.f, 1.f);
    }
    Tensor g;
    double want = loss->forward_backward(ctx, out, target, &g);

    RunCtx dctx = ctx;
    dctx.cuda = g_env.stream->ctx();
    Tensor dout = to_device(out), dtarget = to_device(target), dg = dev_tensor(), dloss = dev_tensor();
    dloss.resize(DP_F32, Shape{1});
    for (int rep = 0; rep < 2; ++rep) {  // twice: the second reuses everything
      op->forward_backward(dctx, dout, dtarget, &dg, dloss.f32());
      std::vector<float> l = to_host(dloss);
      CHECK_MESSAGE(std::fabs(l[0] - want) <= 1e-5 * std::fmax(1.0, std::fabs(want)),
                    name << ": loss share " << l[0] << ", CPU " << want);
      CHECK_MESSAGE(dg.shape() == g.shape(), name << ": gradient shape " << dg.shape().str() << ", CPU " << g.shape().str());
      if (dg.shape() == g.shape()) compare(name + ": d loss / d out", to_host(dg), host_vec(g), kElementwise);
    }
  } catch (const dp::Error& e) {
    FAIL_CHECK(name << ": dp::Error " << std::string(dp_status_name(e.status())) << ": " << std::string(e.what()));
  }
}
}  // namespace

TEST_CASE("cuda losses: cross_entropy with and without label smoothing, mse; a replica's share of the batch") {
  for (double ls : {0.0, 0.1}) {
    nlohmann::json j{{"type", "cross_entropy"}, {"label_smoothing", ls}};
    run_loss(j, 6, 5, 6, 0);
    run_loss(j, 7, 10, 20, 13);      // the last replica of a split
    run_loss(j, 64, 1000, 256, 64);  // a row wider than a warp
  }
  run_loss({{"type", "mse"}}, 6, 3, 6, 0);
  run_loss({{"type", "mse"}}, 5, 4, 12, 7);
}

TEST_CASE("cuda_count_correct: the first arg-max, ties included") {
  progress("cuda_count_correct");
  // Rows with ties: the CPU counts a row correct when the FIRST maximum's
  // index is the target (Replica::correct).
  const int64_t C = 4;
  std::vector<float> x = {
      1, 3, 3, 0,   // first max 1
      5, 5, 5, 5,   // first max 0
      0, 1, 2, 3,   // 3
      -1, -2, -1, -3,  // 0
      2, 9, 1, 9,   // 1
      0, 0, 0, 7,   // 3
  };
  const int64_t rows = static_cast<int64_t>(x.size()) / C;
  std::vector<std::vector<int64_t>> targets = {
      {1, 0, 3, 0, 1, 3},  // all correct: 6
      {2, 1, 3, 2, 3, 3},  // ties resolved to the last would count 3 extra: 2
      {0, 3, 0, 1, 0, 0},  // none: 0
  };
  for (const auto& t : targets) {
    int64_t want = 0;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t best = 0;
      for (int64_t c = 1; c < C; ++c)
        if (x[r * C + c] > x[r * C + best]) best = c;
      want += best == t[r];
    }
    try {
      Tensor out = to_device(tensor_of(Shape{rows, C}, x)), target = to_device(labels_of(t)), count = dev_tensor();
      count.resize(DP_I64, Shape{1});
      int64_t sentinel = 12345;  // *count is written (=), not added to
      CU(cudaMemcpy(count.data(), &sentinel, sizeof sentinel, cudaMemcpyHostToDevice));
      RunCtx ctx;
      ctx.cuda = g_env.stream->ctx();
      cuda_count_correct(ctx, out, target, count.i64());
      device_sync();
      int64_t got = -1;
      CU(cudaMemcpy(&got, count.data(), sizeof got, cudaMemcpyDeviceToHost));
      CHECK_MESSAGE(got == want, "cuda_count_correct gave " << got << ", the CPU rule " << want << " (targets "
                                                            << nlohmann::json(t).dump() << ")");
    } catch (const dp::Error& e) {
      FAIL_CHECK("cuda_count_correct: dp::Error " << std::string(dp_status_name(e.status())) << ": " << std::string(e.what()));
    }
  }
  // Many rows (more than one block), random logits.
  try {
    const int64_t n = 3000, c = 10;
    Tensor out = random_tensor(Shape{n, c}, 77);
    std::vector<int64_t> t(n);
    for (int64_t r = 0; r < n; ++r) t[r] = (r * 13) % c;
    int64_t want = 0;
    for (int64_t r = 0; r < n; ++r) {
      int64_t best = 0;
      for (int64_t k = 1; k < c; ++k)
        if (out.f32()[r * c + k] > out.f32()[r * c + best]) best = k;
      want += best == t[r];
    }
    Tensor dout = to_device(out), dt = to_device(labels_of(t)), count = dev_tensor();
    count.resize(DP_I64, Shape{1});
    RunCtx ctx;
    ctx.cuda = g_env.stream->ctx();
    cuda_count_correct(ctx, dout, dt, count.i64());
    device_sync();
    int64_t got = -1;
    CU(cudaMemcpy(&got, count.data(), sizeof got, cudaMemcpyDeviceToHost));
    CHECK_MESSAGE(got == want, "cuda_count_correct on 3000 rows gave " << got << ", the CPU rule " << want);
  } catch (const dp::Error& e) {
    FAIL_CHECK("cuda_count_correct: dp::Error " << std::string(dp_status_name(e.status())) << ": " << std::string(e.what()));
  }
}

// ------------------------------------------------------- mixed precision --

namespace {

// |x| elementwise: the bound pass below runs the CPU layer on absolute values.
Tensor abs_of(const Tensor& t) {
  Tensor a(DP_F32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) a.f32()[i] = std::fabs(t.f32()[i]);
  return a;
}

// A linear or conv2d op in 16-bit precision (CudaCtx::precision) against the
// CPU's float32 layer. The tolerance is derived, per element: each product
// reads two operands rounded to 16 bits (relative error <= u each: u = 2^-8
// for bfloat16, 2^-11 for float16) and conv2d's results are rounded to 16 bits
// once more, so |cuda - cpu| <= ((1 + u)^3 - 1) * sum_k |a_k| |b_k| (+ float32's
// own error; (1 + u)^3 - 1 = 3.0117 u for bf16, so 3.05 u), where the sum of
// absolute products is the CPU layer run on |x|, |W|, |g| with gradients
// starting at 0: the "bound pass".
void run_lowp_case(const nlohmann::json& j, const Shape& sample, int precision) {
  const std::string name = j.dump() + (precision == DP_PRECISION_BF16 ? " bf16" : " fp16");
  progress(name);
  const double u = precision == DP_PRECISION_BF16 ? 1.0 / 256 : 1.0 / 2048;
  auto l = make_layer(j, 3);
  Harness h(*l, {sample}, 7), hb(*l, {sample}, 7);
  for (float& v : hb.params) v = std::fabs(v);
  CudaSide d;
  d.op = make_cuda_op(*l);
  REQUIRE(d.op);
  d.ctx = h.ctx;
  d.ctx.cuda = g_env.stream->ctx();
  d.ctx.cuda_device = g_env.device;
  d.ctx.cuda_stream = g_env.stream->ctx()->stream;
  // The shared context's precision, restored however this case ends (a
  // failed REQUIRE throws: later cases must not run in 16 bits).
  struct Restore {
    CudaCtx* ctx;
    int precision;
    ~Restore() { ctx->precision = precision; }
  } restore{d.ctx.cuda, d.ctx.cuda->precision};
  d.ctx.cuda->precision = precision;
  upload(d.params, h.params);
  d.in.push_back(dev_tensor());
  d.gin.push_back(dev_tensor());
  for (int64_t batch : {4, 9}) {
    Tensor x = random_tensor(Shape::batched(batch, sample), 100 + batch, -2.f, 2.f);
    Tensor gout = random_tensor(Shape::batched(batch, h.out_sample), 200 + batch);
    std::vector<float> g0(h.grads.size());
    fill_uniform(g0.data(), static_cast<int64_t>(g0.size()), 300 + batch, -0.5f, 0.5f);
    h.grads = g0;
    h.forward({&x});
    h.backward({&x}, gout);
    Tensor xa = abs_of(x), ga = abs_of(gout);
    std::fill(hb.grads.begin(), hb.grads.end(), 0.f);
    hb.forward({&xa});
    hb.backward({&xa}, ga);
    if (d.in[0].shape() != x.shape()) d.in[0].resize(DP_F32, x.shape());
    CU(cudaMemcpy(d.in[0].data(), x.data(), x.bytes(), cudaMemcpyHostToDevice));
    if (d.gout.shape() != gout.shape()) d.gout.resize(DP_F32, gout.shape());
    CU(cudaMemcpy(d.gout.data(), gout.data(), gout.bytes(), cudaMemcpyHostToDevice));
    upload(d.grads, g0);
    d.forward();
    d.backward({});
    device_sync();
    auto bounded = [&](const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                       const std::vector<float>& bound) {
      REQUIRE(got.size() == want.size());
      size_t bad = 0, at = 0;
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const double allowed = 3.05 * u * bound[i] + 1e-5 * (1 + std::fabs(want[i]));
        const double diff = std::fabs(double(got[i]) - double(want[i]));
        if (!(diff <= allowed)) ++bad;
        if (!(diff / allowed <= worst)) worst = diff / allowed, at = i;
      }
      CHECK_MESSAGE(bad == 0, name << ", batch " << batch << ": " << what << ": " << bad << " of " << got.size()
                                   << " beyond the bound; worst [" << at << "]: cuda " << got[at] << " vs cpu " << want[at]
                                   << " (bound " << 3.05 * u * bound[at] << ")");
      if (bad == 0) MESSAGE(name << ", batch " << batch << ": " << what << ": at most " << worst << " of the bound");
    };
    bounded("output", to_host(d.out), host_vec(h.out), host_vec(hb.out));
    bounded("input gradient", to_host(d.gin[0]), host_vec(h.gin[0]), host_vec(hb.gin[0]));
    bounded("parameter gradients (onto non-zero)", to_host(d.grads), h.grads, hb.grads);
  }
}

}  // namespace

TEST_CASE("cuda linear and conv2d in bf16 and fp16 (DP_GROUP_PRECISION): within the derived bound of float32") {
  for (int p : {DP_PRECISION_BF16, DP_PRECISION_FP16}) {
    run_lowp_case({{"type", "linear"}, {"out_features", 96}}, Shape{130}, p);
    run_lowp_case({{"type", "linear"}, {"out_features", 5}, {"bias", false}}, Shape{3, 4}, p);
    run_lowp_case({{"type", "conv2d"}, {"out_channels", 32}, {"kernel_size", 3}, {"padding", 1}}, Shape{16, 12, 12}, p);
    run_lowp_case({{"type", "conv2d"}, {"out_channels", 6}, {"kernel_size", {3, 2}}, {"stride", {2, 1}}, {"groups", 2},
                   {"bias", false}},
                  Shape{4, 5, 4}, p);
  }
}

TEST_CASE("cuda conv2d in bf16 and fp16 through cuDNN's graph API (DP_CUDNN_GRAPH nchw, nhwc): the same bound") {
  struct Unset {
    ~Unset() { unsetenv("DP_CUDNN_GRAPH"); }
  } unset;
  for (const char* mode : {"nchw", "nhwc"}) {
    setenv("DP_CUDNN_GRAPH", mode, 1);  // read as each op is made
    MESSAGE("DP_CUDNN_GRAPH=" << mode);
    for (int p : {DP_PRECISION_BF16, DP_PRECISION_FP16}) {
      run_lowp_case({{"type", "conv2d"}, {"out_channels", 32}, {"kernel_size", 3}, {"padding", 1}}, Shape{16, 12, 12}, p);
      run_lowp_case({{"type", "conv2d"}, {"out_channels", 64}, {"kernel_size", 3}, {"padding", 1}, {"stride", 2}},
                    Shape{32, 16, 16}, p);
      run_lowp_case({{"type", "conv2d"}, {"out_channels", 6}, {"kernel_size", {3, 2}}, {"stride", {2, 1}}, {"groups", 2},
                     {"bias", false}},
                    Shape{4, 5, 4}, p);
    }
  }
}

TEST_CASE("a plugin layer type's CUDA code (swish, dp_plugin.h version 2) against its CPU code") {
  // The plugin's own CPU forward and backward are the reference, as a
  // built-in's CPU layer is; beta's gradient is summed on the GPU.
  // $DP_TEST_PLUGIN_SWISH, the build's path, or next to this program in a
  // build tree copied elsewhere (bench/gpu_pack.sh's bundle).
  std::string swish = PLUGIN_SWISH;
  if (const char* path = std::getenv("DP_TEST_PLUGIN_SWISH")) {
    swish = path;
  } else if (!std::filesystem::exists(swish)) {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) swish = (exe.parent_path() / "../../plugins/swish.so").lexically_normal().string();
  }
  REQUIRE_MESSAGE(std::filesystem::exists(swish), swish << " not found: set DP_TEST_PLUGIN_SWISH to the swish plugin");
  Registry types;
  Plugins plugins;
  plugins.load(types, swish, "");
  REQUIRE_MESSAGE(make_layer(types, {{"type", "swish"}})->runs_on_cuda(), swish << " was built without its CUDA code");
  for (const Shape& s : {Shape{7}, Shape{3, 5, 5}}) {
    Case c = make({{"type", "swish"}}, {s});
    c.types = &types;
    run_case(c);
    c.need = {false};  // the model's input: beta's gradient only
    run_case(c);
  }
}

TEST_CASE("every built-in layer type has a CUDA op") {
  // The registry's built-ins (layers/registry.cpp) against make_cuda_op: a
  // built-in without a CUDA op, or one this test does not know, fails by name
  // (but for those ops/registry.cpp lists as CPU-only so far).
  const std::map<std::string, std::pair<nlohmann::json, std::vector<Shape>>> known = {
      {"add", {{}, {Shape{2, 3, 3}, Shape{2, 3, 3}}}},
      {"avg_pool2d", {{{"kernel_size", 2}}, {Shape{2, 4, 4}}}},
      {"batch_norm", {{}, {Shape{2, 3, 3}}}},
      {"batch_norm1d", {{}, {Shape{2, 3}}}},
      {"batch_norm2d", {{}, {Shape{2, 3, 3}}}},
      {"concat", {{}, {Shape{2, 3, 3}, Shape{1, 3, 3}}}},
      {"conv2d", {{{"out_channels", 2}, {"kernel_size", 1}}, {Shape{2, 3, 3}}}},
      {"dropout", {{}, {Shape{2, 3, 3}}}},
      {"flatten", {{}, {Shape{2, 3, 3}}}},
      {"gelu", {{}, {Shape{2, 3, 3}}}},
      {"global_avg_pool", {{}, {Shape{2, 3, 3}}}},
      {"leaky_relu", {{}, {Shape{2, 3, 3}}}},
      {"linear", {{{"out_features", 2}}, {Shape{2, 3, 3}}}},
      {"log_softmax", {{}, {Shape{2, 3, 3}}}},
      {"max_pool2d", {{{"kernel_size", 2}}, {Shape{2, 4, 4}}}},
      {"relu", {{}, {Shape{2, 3, 3}}}},
      {"sigmoid", {{}, {Shape{2, 3, 3}}}},
      {"softmax", {{}, {Shape{2, 3, 3}}}},
      {"tanh", {{}, {Shape{2, 3, 3}}}},
  };
  std::string names = registry().layer_names() + ",";
  int seen = 0;
  for (size_t at = 0, comma; (comma = names.find(',', at)) != std::string::npos; at = comma + 1) {
    std::string t = names.substr(at, comma - at);
    while (!t.empty() && t.front() == ' ') t.erase(t.begin());
    if (t.empty()) continue;
    ++seen;
    if (cpu_only_builtin(t)) continue;  // refused on a GPU group (test_cuda_group.cpp)
    auto k = known.find(t);
    if (k == known.end()) {
      FAIL_CHECK("built-in layer type '" << t << "' is not covered by tests/cuda/test_cuda_layers.cpp: add it");
      continue;
    }
    try {
      nlohmann::json j = k->second.first.is_null() ? nlohmann::json::object() : k->second.first;
      j["type"] = t;
      auto l = make_layer(j);
      l->infer(k->second.second);
      CHECK_MESSAGE(make_cuda_op(*l) != nullptr, "built-in layer type '" << t << "' has no CUDA op");
    } catch (const std::exception& e) {
      FAIL_CHECK("'" << t << "': " << std::string(e.what()));
    }
  }
  CHECK(seen >= 18);
}

#endif  // DP_HAVE_CUDA

int main(int argc, char** argv) {
#ifndef DP_HAVE_CUDA
  (void)argc, (void)argv;
  std::printf("cuda_layers: SKIP: this build of dp has no CUDA backend (meson option cuda: configure with -Dcuda=enabled and the CUDA toolkit)\n");
  return 77;
#else
  std::string why;
  int n = dp::cuda_device_count(&why);
  if (n <= 0) {
    std::printf("cuda_layers: SKIP: %s\n", why.empty() ? "no usable CUDA device" : why.c_str());
    return 77;
  }
  try {
    std::printf("cuda_layers: %d device(s); cuda:0 is %s\n", n, dp::cuda_device_name(0).c_str());
    g_env.stream = new dp::CudaStream(0, /*allow_tf32=*/false);
    // The stream's own allocator, counted; op-internal allocations through
    // ctx()->alloc are counted too.
    g_env.alloc = new CountingAllocator(g_env.stream->ctx()->alloc);
    g_env.stream->ctx()->alloc = g_env.alloc;
  } catch (const std::exception& e) {
    std::printf("cuda_layers: FAIL: cannot set up cuda:0: %s\n", e.what());
    return 1;
  }
  std::fflush(stdout);
  doctest::Context ctx(argc, argv);
  int rc = ctx.run();
  delete g_env.stream;  // synchronises; every test's device tensor is gone by now
  return rc;
#endif
}
