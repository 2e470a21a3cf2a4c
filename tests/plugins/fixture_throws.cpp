// A plugin written in C++ whose callbacks throw (or break the err contract)
// on request: the host's guards turn what escapes into DP_ERR_PLUGIN naming
// the layer, plugin and callback (tests/plugins/test_plugins.cpp).
//
// Layer type "throws": the identity, copied through api->parallel_for, with a
// buffer "mean" that merge_stats sets to the training batch's mean input.
// JSON: "throw_in": "create", "infer", "forward", "backward", "parallel_for",
// "merge_stats", "destroy" or "long_error" (forward fails with an err of
// `cap` characters and no NUL), "huge_scratch" (forward fails if
// api->scratch gives a block for a size no machine has: SIZE_MAX and its
// neighbours must be NULL) or "late_register" (create fails if
// register_layer, called with the registrar kept from init, is accepted);
// "at_step": the step at which forward,
// backward, parallel_for or long_error fail, once (merge_stats: on its
// at_step-th call, from 0); "stats": the count given to declare_stats (default 1).
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dp_plugin.h"

namespace {
const dp_host_api* api;
dp_plugin_registrar* kept_registrar;  // misuse on purpose: valid only during init
dp_plugin_layer_type kept_type;

struct Throws {
  std::string in;
  int64_t at_step = 0, stats = 1, features = 0;
  mutable std::atomic<int64_t> merges{0};
  mutable std::atomic<bool> fired{false};
  // Once (one replica's call), so that the step can be retried.
  bool now(const char* where, const dp_plugin_run* run) const {
    return in == where && run->step == at_step && !fired.exchange(true);
  }
};

struct Copy {
  const float* x;
  float* y;
  int64_t width;
  bool throw_now;
};

void copy_rows(void* user, int64_t begin, int64_t end) {
  auto* c = static_cast<Copy*>(user);
  if (c->throw_now) throw std::runtime_error("thrown in parallel_for on purpose");
  std::memcpy(c->y + begin * c->width, c->x + begin * c->width, static_cast<size_t>((end - begin) * c->width) * sizeof(float));
}

int create(void*, dp_plugin_args* args, void** instance, char* err, size_t cap) {
  auto* t = new Throws;
  *instance = t;  // destroy frees it, also when create fails
  const char* in = "";
  if (api->args_string(args, "throw_in", "", &in) || api->args_int(args, "at_step", 0, 0, &t->at_step) ||
      api->args_int(args, "stats", 1, -100, &t->stats))
    return 1;
  t->in = in;
  if (t->in == "create") throw std::runtime_error("thrown in create on purpose");
  if (t->in == "late_register") {
    dp_plugin_layer_type late = kept_type;
    late.name = "throws_late";
    if (api->register_layer(kept_registrar, &late) == 0) return std::snprintf(err, cap, "a late register_layer was accepted"), 1;
  }
  return 0;
}

void destroy(void* instance) {
  auto* t = static_cast<Throws*>(instance);
  bool throw_now = t && t->in == "destroy";
  delete t;
  if (throw_now) throw std::runtime_error("thrown in destroy on purpose");
}

int infer(void* instance, dp_plugin_build* build, const dp_plugin_shape* in, int32_t, dp_plugin_shape* out, char* err,
          size_t cap) {
  auto* t = static_cast<Throws*>(instance);
  if (t->in == "infer") throw std::runtime_error("thrown in infer on purpose");
  if (in[0].ndim != 1) return std::snprintf(err, cap, "takes [B, F]"), 1;
  t->features = in[0].dims[0];
  *out = in[0];
  int64_t one = 1;
  if (api->declare_buffer(build, "mean", 1, &one, DP_PLUGIN_INIT_ZEROS, 0)) return 1;
  return api->declare_stats(build, t->stats);
}

int forward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  auto* t = static_cast<const Throws*>(instance);
  if (t->now("forward", run)) throw std::runtime_error("thrown in forward on purpose");
  if (t->in == "huge_scratch")
    for (size_t bytes : {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 3, SIZE_MAX - 63, SIZE_MAX / 2 + 1, SIZE_MAX / 4 + 1})
      if (api->scratch(run, 0, bytes)) return std::snprintf(err, cap, "scratch(%zu bytes) gave a block", bytes), 1;
  if (t->now("long_error", run)) {
    std::memset(err, 'A', cap);  // no NUL: the contract broken
    return 1;
  }
  const int64_t rows = io->output.shape[0];
  const auto* x = static_cast<const float*>(io->inputs[0].data);
  Copy c{x, static_cast<float*>(io->output.data), t->features, t->now("parallel_for", run)};
  api->parallel_for(run, rows, 1, copy_rows, &c);
  if (run->training && io->stats) {
    double sum = 0;
    for (int64_t i = 0; i < rows * t->features; ++i) sum += x[i];
    io->stats[0] = static_cast<float>(rows ? sum / static_cast<double>(rows * t->features) : 0);
  }
  return 0;
}

int backward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char*, size_t) {
  auto* t = static_cast<const Throws*>(instance);
  if (t->now("backward", run)) throw std::runtime_error("thrown in backward on purpose");
  if (io->grad_inputs[0].data)
    std::memcpy(io->grad_inputs[0].data, io->grad_output.data,
                static_cast<size_t>(dp_plugin_numel(&io->grad_output)) * sizeof(float));
  return 0;
}

void merge_stats(const void* instance, float* buffers, const float* const* stats, const int64_t* counts, int32_t replicas) {
  auto* t = static_cast<const Throws*>(instance);
  if (t->in == "merge_stats" && t->merges++ == t->at_step) throw std::runtime_error("thrown in merge_stats on purpose");
  double sum = 0;
  int64_t rows = 0;
  for (int32_t r = 0; r < replicas; ++r) sum += static_cast<double>(stats[r][0]) * counts[r], rows += counts[r];
  buffers[0] = static_cast<float>(rows ? sum / static_cast<double>(rows) : 0);
}
}  // namespace

extern "C" DP_PLUGIN_EXPORT int dp_plugin_init(const dp_host_api_base* base, char* err, size_t cap) {
  api = base->get_api(base, 1);
  if (!api) return std::snprintf(err, cap, "needs host API 1"), 1;
  dp_plugin_layer_type t;
  std::memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.name = "throws";
  t.version = 1;
  t.min_inputs = t.max_inputs = 1;
  t.create = create;
  t.destroy = destroy;
  t.infer = infer;
  t.forward = forward;
  t.backward = backward;
  t.merge_stats = merge_stats;
  kept_registrar = base->registrar;
  kept_type = t;
  return api->register_layer(base->registrar, &t);
}
