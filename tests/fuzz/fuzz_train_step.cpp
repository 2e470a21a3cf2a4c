// Fuzz target, differential: a model's JSON trained on 1 CPU device and on N
// (2 to 4), through the C ABI. nn.DataParallel's promise, dp's first: for
// every model that builds (small enough: see the caps), the same batches
// give N devices the losses, gradients and parameters of 1 device, up to
// the rounding of sums in another order. Models with batch norm are run but
// not compared (each device normalises by its own rows, as nn.DataParallel);
// the swish and rms_norm plugins are loaded, a "plugins" key is refused.
//
// Input: a flags byte (bits 0-1: N - 2 extra devices, so N = 2..5 capped at
// 4; bit 2: momentum), a byte for the batch (1 + b % 9 rows), then the JSON.
// The batches' values come from a hash of the whole input.
//
// Each model runs forward_backward (loss and gradients compared, against
// the largest gradient: a sum of cancelling terms rounds by the size of the
// terms), evaluate on the same parameters (its loss), then a train_step on
// another batch (its loss, and the parameters against the update's size).
// Windows (kernel_size, padding, dilation, stride) over 16 are skipped: the
// caps bound the model's size, not its work or its layers' scratch (a
// kernel and padding of 100 on an 8x8 input took 9 s). A refusal is a
// finding only where 1 device succeeded and N devices failed with anything
// but DP_ERR_NUMERIC (a loss at float32's edge may round either way) or
// DP_ERR_OUT_OF_MEMORY (N replicas hold more).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dp.h"
#include "fuzz_util.h"

namespace {

const int64_t kMemoryLimit = int64_t(16) << 20;
const int64_t kMaxParams = 50000, kMaxInput = 1024, kMaxOutput = 256;
const float kLr = 0.01f;

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Batch {
  std::vector<float> x, yf;
  std::vector<int64_t> yi;
};

// What one device count did: each call's status, loss, and the values read after it.
struct Run {
  dp_status create = DP_OK;  // the group's and the optimizer's
  dp_status fb = DP_OK, eval = DP_OK, step = DP_OK;
  float fb_loss = 0, eval_loss = 0, step_loss = 0;
  std::vector<float> grads, step_grads, params;
};

// One context for the process, with the memory cap and the repository's
// swish and rms_norm plugins (a plugin's layer must split as a built-in
// does). Loaded once: a plugin closed between inputs would take its coverage
// counters with it, and libFuzzer reads them after every input.
dp_context* context() {
  static dp_context* ctx = [] {
    dp_context* c = nullptr;
    if (dp_context_create(&c) != DP_OK) dp::fuzz::MemFile::abort_with("dp_context_create failed");
    dp_context_set_option(c, DP_CONTEXT_MEMORY_LIMIT, kMemoryLimit);
    for (const char* p : {DP_FUZZ_PLUGIN_SWISH, DP_FUZZ_PLUGIN_RMS_NORM})
      if (dp_context_load_plugin(c, p) != DP_OK) dp::fuzz::MemFile::abort_with("a plugin did not load");
    return c;
  }();
  return ctx;
}

struct Handles {
  dp_context* ctx = context();
  dp_model* model = nullptr;
  dp_group* group = nullptr;
  dp_optimizer* opt = nullptr;
  ~Handles() {
    dp_optimizer_destroy(opt);
    dp_group_destroy(group);
    dp_model_destroy(model);
  }
};

dp_tensor* tensor(dp_context* ctx, dp_dtype dt, const void* data, const std::vector<int64_t>& shape) {
  dp_tensor* t = nullptr;
  if (dp_tensor_from_host(ctx, dt, data, static_cast<int>(shape.size()), shape.data(), &t) != DP_OK)
    dp::fuzz::MemFile::abort_with("dp_tensor_from_host failed");
  return t;
}

std::vector<float> read(const dp_model* m, int64_t n, bool grads) {
  std::vector<float> v(static_cast<size_t>(n));
  if (n == 0) return v;  // a model of parameter-free layers (the calls refuse a NULL buffer)
  if ((grads ? dp_model_copy_gradients(m, v.data(), n) : dp_model_copy_parameters(m, v.data(), n)) != DP_OK)
    dp::fuzz::MemFile::abort_with("copying the model's values failed");
  return v;
}

// The model on `devices`, through the calls: forward_backward, evaluate (on
// the same parameters), train_step; false where the model does not build or
// fit the caps (then nothing is compared). A group or optimizer refused is
// out->create.
bool run(const std::string& json, const std::string& devices, bool momentum, const Batch* batches,
         const std::vector<int64_t>& xshape, const std::vector<int64_t>& yshape, bool classes, Run* out) {
  Handles h;
  if (dp_model_from_json(h.ctx, json.c_str(), &h.model) != DP_OK) return false;
  int64_t n = 0;
  dp_model_num_parameters(h.model, &n);
  if (n > kMaxParams) return false;
  out->create = dp_group_create(h.model, devices.c_str(), &h.group);
  const char* opt = momentum ? R"({"type": "sgd", "lr": 0.01, "momentum": 0.9})" : R"({"type": "sgd", "lr": 0.01})";
  if (out->create == DP_OK) out->create = dp_optimizer_create(h.group, opt, &h.opt);
  if (out->create != DP_OK) return true;
  dp_tensor* x[2];
  dp_tensor* y[2];
  for (int b = 0; b < 2; ++b) {
    x[b] = tensor(h.ctx, DP_F32, batches[b].x.data(), xshape);
    y[b] = classes ? tensor(h.ctx, DP_I64, batches[b].yi.data(), yshape) : tensor(h.ctx, DP_F32, batches[b].yf.data(), yshape);
  }
  out->fb = dp_group_forward_backward(h.group, x[0], y[0], 1.0, &out->fb_loss);
  if (out->fb == DP_OK) out->grads = read(h.model, n, true);
  out->eval = dp_group_evaluate(h.group, x[0], y[0], &out->eval_loss, nullptr);
  dp_group_zero_grad(h.group);
  out->step = dp_group_train_step(h.group, h.opt, x[1], y[1], &out->step_loss);
  if (out->step == DP_OK) out->step_grads = read(h.model, n, true);
  out->params = read(h.model, n, false);
  for (int b = 0; b < 2; ++b) {
    dp_tensor_destroy(x[b]);
    dp_tensor_destroy(y[b]);
  }
  return true;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float f : v) m = std::fmax(m, std::fabs(static_cast<double>(f)));
  return m;
}

bool close(double a, double b, double tol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= tol;
}

// b's failure where a succeeded: only what N devices may hit and 1 may not.
void check_status(dp_status one, dp_status many, const char* what) {
  if (one == DP_OK && many != DP_OK && many != DP_ERR_NUMERIC && many != DP_ERR_OUT_OF_MEMORY) {
    std::fprintf(stderr, "%s: 1 device %s, N devices %s: %s\n", what, dp_status_name(one), dp_status_name(many),
                 dp_last_error());
    std::abort();
  }
}

// Where values are ordinary: a loss and gradients of moderate size. Past
// that (a model that doubles its values layer after layer, a softmax
// saturated to rounding noise) the rounding of another order of sums has no
// bound these checks could state, and nothing is compared.
bool ordinary(float loss, const std::vector<float>& grads) {
  const double g = max_abs(grads);
  return std::isfinite(loss) && std::fabs(loss) < 1e4 && g < 1e4 && g > 1e-5;
}

// The bounds are loose against rounding (values of moderate size, summed in
// another order, and products over fewer rows: 1e-6 relative and below) and
// tight against a wrong split (a row counted twice or not at all, a
// denominator of one device's rows: 1/N and more).
void compare(const Run& one, const Run& many) {
  check_status(one.create, many.create, "dp_group_create or dp_optimizer_create");
  if (one.create != DP_OK || many.create != DP_OK) return;
  check_status(one.fb, many.fb, "forward_backward");
  check_status(one.eval, many.eval, "evaluate");
  check_status(one.step, many.step, "train_step");
  if (one.fb != DP_OK || many.fb != DP_OK || !ordinary(one.fb_loss, one.grads)) return;
  DP_FUZZ_CHECK(close(one.fb_loss, many.fb_loss, 1e-3 * (1 + std::fabs(one.fb_loss))));
  const double g = max_abs(one.grads);
  for (size_t i = 0; i < one.grads.size(); ++i) DP_FUZZ_CHECK(close(one.grads[i], many.grads[i], 1e-2 * g));
  if (one.eval == DP_OK && many.eval == DP_OK)  // the same parameters, without dropout
    DP_FUZZ_CHECK(close(one.eval_loss, many.eval_loss, 1e-3 * (1 + std::fabs(one.eval_loss))));
  if (one.step != DP_OK || many.step != DP_OK || !ordinary(one.step_loss, one.step_grads)) return;
  DP_FUZZ_CHECK(close(one.step_loss, many.step_loss, 1e-3 * (1 + std::fabs(one.step_loss))));
  // The update's size (SGD, or momentum's first step: the step's gradients),
  // with the first call's largest gradient as slack.
  const double u = kLr * 2 * (max_abs(one.step_grads) + g);
  for (size_t i = 0; i < one.params.size(); ++i)
    DP_FUZZ_CHECK(close(one.params[i], many.params[i], 1e-6 * (1 + std::fabs(one.params[i])) + 1e-2 * u));
}

// A window argument (an integer, or a list of them) over 16.
bool large_windows(const nlohmann::json& j) {
  const auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array()) return false;
  for (const auto& l : *layers) {
    if (!l.is_object()) continue;
    for (const char* key : {"kernel_size", "padding", "dilation", "stride"}) {
      const auto v = l.find(key);
      if (v == l.end()) continue;
      for (const auto& e : v->is_array() ? *v : nlohmann::json::array({*v}))
        if (e.is_number() && e.get<double>() > 16) return true;
    }
  }
  return false;
}

bool has_batch_norm(const nlohmann::json& j) {
  const auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array()) return false;
  for (const auto& l : *layers) {
    const auto t = l.find("type");
    if (t != l.end() && t->is_string() && t->get<std::string>().rfind("batch_norm", 0) == 0) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dp::fuzz::Cursor in(data, size);
  const uint8_t flags = in.u8();
  const int64_t rows = 1 + in.u8() % 9;
  const std::string json = in.rest_str();
  const int devices = std::min(4, 2 + (flags & 3));
  const bool momentum = flags & 4;

  // What the model is, as its JSON says (dp builds it below, and refuses what nlohmann takes).
  nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.contains("plugins") || large_windows(j)) return 0;
  const auto loss = j.find("loss");
  if (loss == j.end() || !loss->is_object() || !loss->contains("type") || !(*loss)["type"].is_string()) return 0;
  const std::string loss_type = (*loss)["type"].get<std::string>();
  const bool classes = loss_type == "cross_entropy" || loss_type == "nll";

  // The shapes, from a model built once (as every run builds it again).
  std::vector<int64_t> xshape{rows}, yshape{rows};
  int64_t out_numel = 1, in_numel = 1;
  {
    Handles h;
    if (dp_model_from_json(h.ctx, json.c_str(), &h.model) != DP_OK) return 0;
    int nd = 0;
    int64_t shape[DP_MAX_DIMS];
    dp_model_input_shape(h.model, &nd, shape);
    for (int i = 0; i < nd; ++i) xshape.push_back(shape[i]), in_numel *= shape[i];
    dp_model_output_shape(h.model, &nd, shape);
    for (int i = 0; i < nd; ++i) {
      out_numel *= shape[i];
      if (!classes) yshape.push_back(shape[i]);
    }
  }
  if (in_numel > kMaxInput || out_numel > kMaxOutput) return 0;

  // Two batches: inputs in [-2, 2]; classes in [0, C) (C: the output's size), or floats in [0, 1].
  uint64_t seed = 14695981039346656037ull;
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 1099511628211ull;
  auto uniform = [&](double lo, double hi) { return lo + (hi - lo) * static_cast<double>(mix(seed++) >> 11) * 0x1p-53; };
  Batch batches[2];
  for (Batch& b : batches) {
    for (int64_t i = 0; i < rows * in_numel; ++i) b.x.push_back(static_cast<float>(uniform(-2, 2)));
    for (int64_t i = 0; i < rows * (classes ? 1 : out_numel); ++i) {
      if (classes)
        b.yi.push_back(static_cast<int64_t>(mix(seed++) % static_cast<uint64_t>(out_numel)));
      else
        b.yf.push_back(static_cast<float>(uniform(0, 1)));
    }
  }

  Run one, many;
  if (!run(json, "cpu:0", momentum, batches, xshape, yshape, classes, &one)) return 0;
  std::string list = "cpu:0";
  for (int d = 1; d < devices; ++d) list += ",cpu:" + std::to_string(d);
  if (!run(json, list, momentum, batches, xshape, yshape, classes, &many)) return 0;
  const bool bn = has_batch_norm(j);
  if (!bn) compare(one, many);
  if (std::getenv("DP_FUZZ_VERBOSE"))
    std::fprintf(stderr, "  %s on %d devices, %lld rows: %s; %s, %s, %s; losses %g %g, %g %g, %g %g%s\n", loss_type.c_str(),
                 devices, static_cast<long long>(rows), dp_status_name(many.create), dp_status_name(many.fb),
                 dp_status_name(many.eval), dp_status_name(many.step), one.fb_loss, many.fb_loss, one.eval_loss,
                 many.eval_loss, one.step_loss, many.step_loss, bn ? " (batch norm: not compared)" : "");
  return 0;
}
