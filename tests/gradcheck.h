// Test helpers for any Layer or Loss (built-in or plugin):
//   Harness     - a layer after infer(), with the parameters, buffers, stats,
//                 scratch and output tensors one replica of a model would give it;
//   gradcheck   - analytic gradients (backward) against central differences of
//                 L = sum(out * R) for a fixed random R, for inputs and params;
//   loss_gradcheck - the same for a Loss's gout;
//   check_steady - a second forward/backward at the same batch size must not
//                 reallocate scratch, output or input-gradient tensors.
// Independent of the test framework: results are returned, the caller asserts.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "layers/layer.h"
#include "tensor/tensor.h"

namespace dp {
namespace test {

// Deterministic values in [lo, hi).
inline void fill_uniform(float* p, int64_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  for (int64_t i = 0; i < n; ++i) p[i] = lo + (hi - lo) * uniform01(seed, static_cast<uint64_t>(i));
}
inline Tensor random_tensor(const Shape& s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t(DP_F32, s);
  fill_uniform(t.f32(), t.numel(), seed, lo, hi);
  return t;
}
inline Tensor tensor_of(const Shape& s, const std::vector<float>& v) {
  Tensor t(DP_F32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = v.at(static_cast<size_t>(i));
  return t;
}
inline Tensor labels_of(const std::vector<int64_t>& v) {
  Tensor t(DP_I64, Shape{static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.i64()[i] = v[i];
  return t;
}

inline int64_t specs_size(const std::vector<TensorSpec>& s) {
  int64_t n = 0;
  for (const auto& t : s) n += t.shape.numel();
  return n;
}
inline void init_specs(const std::vector<TensorSpec>& specs, float* p, uint64_t seed) {
  for (size_t k = 0; k < specs.size(); ++k) {
    const auto& s = specs[k];
    int64_t n = s.shape.numel();
    if (s.init.kind == Init::kZeros)
      for (int64_t i = 0; i < n; ++i) p[i] = 0.f;
    else if (s.init.kind == Init::kOnes)
      for (int64_t i = 0; i < n; ++i) p[i] = 1.f;
    else
      fill_uniform(p, n, hash_keys(seed, k), -s.init.bound, s.init.bound);
    p += n;
  }
}

// One replica's view of a layer.
struct Harness {
  Layer* layer;
  std::vector<Shape> in_samples;
  Shape out_sample;
  std::vector<TensorSpec> param_specs, buffer_specs;
  std::vector<float> params, grads, buffers, stats;
  bool assign_grads = false;                               // LayerIO::assign_grads of backward()
  void (*grads_final)(void*, int64_t) = nullptr;            // LayerIO::grads_final of backward() (user null)
  std::vector<Tensor> scratch;
  Tensor out;
  std::vector<Tensor> gin;
  RunCtx ctx;
  // Optional heap-allocation counter (see check_steady); layer_allocs sums
  // its increase over the layer's own forward/backward calls.
  std::function<long()> alloc_counter;
  long layer_allocs = 0;

  // Calls infer (which may throw) and initialises params/buffers per their Init.
  Harness(Layer& l, std::vector<Shape> samples, uint64_t seed = 7) : layer(&l), in_samples(std::move(samples)) {
    out_sample = l.infer(in_samples);
    param_specs = l.params();
    buffer_specs = l.buffers();
    params.resize(static_cast<size_t>(specs_size(param_specs)));
    grads.assign(params.size(), 0.f);
    buffers.resize(static_cast<size_t>(specs_size(buffer_specs)));
    stats.assign(static_cast<size_t>(l.stats_size()), 0.f);
    init_specs(param_specs, params.data(), seed);
    init_specs(buffer_specs, buffers.data(), seed + 1);
    gin.resize(in_samples.size());
  }

  void randomize_params(uint64_t seed, float lo = -1.f, float hi = 1.f) {
    fill_uniform(params.data(), static_cast<int64_t>(params.size()), seed, lo, hi);
  }

  LayerIO io(const std::vector<const Tensor*>& in) {
    LayerIO io;
    io.in = in;
    io.out = &out;
    io.params = params.data();
    io.grads = grads.data();
    io.buffers = buffers.data();
    io.stats = stats.empty() ? nullptr : stats.data();
    io.scratch = &scratch;
    return io;
  }

  Tensor& forward(const std::vector<const Tensor*>& in) {
    LayerIO x = io(in);
    long a = alloc_counter ? alloc_counter() : 0;
    layer->forward(ctx, x);
    if (alloc_counter) layer_allocs += alloc_counter() - a;
    return out;
  }
  // need[i] false: gin[i] is passed as null. Empty need: all inputs.
  void backward(const std::vector<const Tensor*>& in, const Tensor& gout, std::vector<bool> need = {}) {
    LayerIO x = io(in);
    x.gout = &gout;
    x.assign_grads = assign_grads;
    x.grads_final = grads_final;
    for (size_t i = 0; i < in.size(); ++i) x.gin.push_back(need.empty() || need[i] ? &gin[i] : nullptr);
    long a = alloc_counter ? alloc_counter() : 0;
    layer->backward(ctx, x);
    if (alloc_counter) layer_allocs += alloc_counter() - a;
  }
};

inline std::vector<const Tensor*> cptrs(const std::vector<Tensor*>& v) {
  return std::vector<const Tensor*>(v.begin(), v.end());
}

struct CheckResult {
  bool ok = true;
  double worst = 0;  // largest |analytic - numeric| / max(1, |numeric|)
  int checked = 0;
  std::string detail;  // the first failures
};

struct GradOptions {
  GradOptions() = default;
  GradOptions(double eps_, double tol_) : eps(eps_), tol(tol_) {}
  double eps = 1e-2;
  double tol = 1e-2;                // |a - n| <= tol * max(1, |n|)
  std::vector<bool> check_inputs;   // empty: all inputs
  bool check_params = true;
  uint64_t seed = 99;               // for R
};

namespace detail {
inline double weighted_sum(const Tensor& out, const Tensor& R) {
  double s = 0;
  for (int64_t i = 0; i < out.numel(); ++i) s += static_cast<double>(out.f32()[i]) * R.f32()[i];
  return s;
}
inline void compare(CheckResult& r, const std::string& what, int64_t i, double a, double n, double tol) {
  double err = std::fabs(a - n) / std::max(1.0, std::fabs(n));
  ++r.checked;
  if (err > r.worst) r.worst = err;
  if (!(err <= tol)) {  // NaN fails too
    if (r.ok || r.detail.size() < 600) {
      std::ostringstream o;
      o << what << "[" << i << "]: analytic " << a << ", numeric " << n << "; ";
      r.detail += o.str();
    }
    r.ok = false;
  }
}
}  // namespace detail

// Central differences of L = sum(out * R) against backward(), with the
// harness's ctx (training flag, step, seed...). Grads are zeroed first.
inline CheckResult gradcheck(Harness& h, const std::vector<Tensor*>& inputs, const GradOptions& opt = {}) {
  CheckResult r;
  auto in = cptrs(inputs);
  Tensor& out0 = h.forward(in);
  Tensor R = random_tensor(out0.shape(), opt.seed);
  std::fill(h.grads.begin(), h.grads.end(), 0.f);
  std::vector<bool> need(inputs.size(), true);
  if (!opt.check_inputs.empty()) need = opt.check_inputs;
  h.backward(in, R, need);
  std::vector<std::vector<float>> ag(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!need[k]) continue;
    if (h.gin[k].shape() != inputs[k]->shape()) {
      r.ok = false;
      r.detail += "gin[" + std::to_string(k) + "] has shape " + h.gin[k].shape().str() + ", input " +
                  inputs[k]->shape().str() + "; ";
      return r;
    }
    ag[k].assign(h.gin[k].f32(), h.gin[k].f32() + h.gin[k].numel());
  }
  std::vector<float> gp = h.grads;
  auto L = [&]() { return detail::weighted_sum(h.forward(in), R); };
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!need[k]) continue;
    float* x = inputs[k]->f32();
    for (int64_t i = 0; i < inputs[k]->numel(); ++i) {
      float v = x[i];
      x[i] = static_cast<float>(v + opt.eps);
      double lp = L();
      x[i] = static_cast<float>(v - opt.eps);
      double lm = L();
      x[i] = v;
      detail::compare(r, "input" + std::to_string(k), i, ag[k][i], (lp - lm) / (2 * opt.eps), opt.tol);
    }
  }
  if (opt.check_params) {
    for (size_t i = 0; i < h.params.size(); ++i) {
      float v = h.params[i];
      h.params[i] = static_cast<float>(v + opt.eps);
      double lp = L();
      h.params[i] = static_cast<float>(v - opt.eps);
      double lm = L();
      h.params[i] = v;
      detail::compare(r, "param", static_cast<int64_t>(i), gp[i], (lp - lm) / (2 * opt.eps), opt.tol);
    }
  }
  return r;
}

// d loss / d out from forward_backward against central differences of the loss.
inline CheckResult loss_gradcheck(const Loss& loss, const RunCtx& ctx, Tensor& out, const Tensor& target,
                                  double eps = 1e-2, double tol = 1e-2) {
  CheckResult r;
  Tensor g, scratch;
  loss.forward_backward(ctx, out, target, &g);
  float* x = out.f32();
  for (int64_t i = 0; i < out.numel(); ++i) {
    float v = x[i];
    x[i] = static_cast<float>(v + eps);
    double lp = loss.forward_backward(ctx, out, target, &scratch);
    x[i] = static_cast<float>(v - eps);
    double lm = loss.forward_backward(ctx, out, target, &scratch);
    x[i] = v;
    detail::compare(r, "out", i, g.f32()[i], (lp - lm) / (2 * eps), tol);
  }
  return r;
}

// Runs forward+backward twice at the same batch; the second must reuse every
// tensor (same data pointers, no new scratch entries). `allocs`, when given,
// counts heap allocations: none may happen inside the layer's second step.
inline CheckResult check_steady(Harness& h, const std::vector<Tensor*>& inputs,
                                const std::function<long()>& allocs = {}) {
  CheckResult r;
  h.alloc_counter = allocs;
  auto in = cptrs(inputs);
  auto step = [&]() {
    Tensor& o = h.forward(in);
    h.backward(in, o);  // any gout of the right shape
  };
  step();
  std::vector<const void*> before;
  for (auto& t : h.scratch) before.push_back(t.data());
  before.push_back(h.out.data());
  for (auto& t : h.gin) before.push_back(t.data());
  size_t nscratch = h.scratch.size();
  h.layer_allocs = 0;
  step();
  long a0 = 0, a1 = h.layer_allocs;
  h.alloc_counter = nullptr;
  std::vector<const void*> after;
  for (auto& t : h.scratch) after.push_back(t.data());
  after.push_back(h.out.data());
  for (auto& t : h.gin) after.push_back(t.data());
  if (h.scratch.size() != nscratch) r.ok = false, r.detail += "scratch grew; ";
  if (before != after) r.ok = false, r.detail += "a tensor was reallocated; ";
  if (a1 != a0) r.ok = false, r.detail += std::to_string(a1 - a0) + " heap allocations in the second step; ";
  return r;
}

}  // namespace test
}  // namespace dp
