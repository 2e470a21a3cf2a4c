// rms_norm: torch.nn.RMSNorm over the last dimension, written in C++ against
// dp_plugin.h only:
//   y = x / sqrt(mean(x^2 over the last dim) + eps) * weight
// Hyperparameters: "normalized_shape" (checked against the last dim if
// given), "eps" (default: float32's machine epsilon, as PyTorch's None),
// "elementwise_affine"=true ("<name>.weight", ones), "momentum"=0.1.
// Buffer "<name>.running_ms" (1 float, starts at 1): the mean square of the
// inputs, tracked in training as batch norm tracks its statistics
// (running = (1 - momentum) * running + momentum * batch mean square, the
// batch's over all replicas). It is informational; the output never uses it.
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <new>

#include "dp_plugin.h"

namespace {

const dp_host_api* api;

struct RmsNorm {
  double eps = FLT_EPSILON;
  bool affine = true;
  double momentum = 0.1;
  int64_t dim = 0;  // set by infer
};

int create(void*, dp_plugin_args* args, void** instance, char* err, size_t cap) {
  RmsNorm* r = new (std::nothrow) RmsNorm;
  if (!r) return std::snprintf(err, cap, "out of memory"), 1;
  int64_t ns = 0;
  int affine = 1;
  if (api->args_int(args, "normalized_shape", 0, 1, &ns) || api->args_float(args, "eps", FLT_EPSILON, 0, 1, &r->eps) ||
      api->args_bool(args, "elementwise_affine", 1, &affine) ||
      api->args_float(args, "momentum", 0.1, 0, 1, &r->momentum)) {
    delete r;
    return 1;  // the host has the path-named message
  }
  r->affine = affine != 0;
  r->dim = ns;  // 0: any
  *instance = r;
  return 0;
}

void destroy(void* instance) { delete static_cast<RmsNorm*>(instance); }

int infer(void* instance, dp_plugin_build* build, const dp_plugin_shape* in, int32_t, dp_plugin_shape* out, char* err,
          size_t cap) {
  auto* r = static_cast<RmsNorm*>(instance);
  if (in[0].ndim < 1) return std::snprintf(err, cap, "needs at least one dimension per sample"), 1;
  int64_t last = in[0].dims[in[0].ndim - 1];
  if (r->dim && r->dim != last)
    return std::snprintf(err, cap, "normalized_shape is %lld but the input's last dimension is %lld", (long long)r->dim,
                         (long long)last),
           1;
  r->dim = last;
  *out = in[0];
  int64_t one = 1;
  if (r->affine && api->declare_param(build, "weight", 1, &last, DP_PLUGIN_INIT_ONES, 0)) return 1;
  if (api->declare_buffer(build, "running_ms", 1, &one, DP_PLUGIN_INIT_ONES, 0)) return 1;
  return api->declare_stats(build, 1);
}

int64_t rows_of(const dp_plugin_tensor& t, int64_t dim) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n / dim;
}

struct Job {
  const RmsNorm* r;
  const float *x, *g, *w;
  float *y, *gx, *inv;  // inv: 1/rms per row (scratch)
  double* ms;
};

int forward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  auto* r = static_cast<const RmsNorm*>(instance);
  int64_t rows = rows_of(io->inputs[0], r->dim);
  Job j{r, static_cast<const float*>(io->inputs[0].data), nullptr, r->affine ? io->params : nullptr,
        static_cast<float*>(io->output.data), nullptr, nullptr, nullptr};
  j.inv = static_cast<float*>(api->scratch(run, 0, static_cast<size_t>(rows) * sizeof(float)));
  j.ms = static_cast<double*>(api->scratch(run, 1, static_cast<size_t>(rows) * sizeof(double)));
  if (!j.inv || !j.ms) return std::snprintf(err, cap, "no scratch memory for %lld rows", (long long)rows), 1;
  api->parallel_for(run, rows, 16, [](void* p, int64_t b, int64_t e) {
    auto& j = *static_cast<Job*>(p);
    int64_t d = j.r->dim;
    for (int64_t i = b; i < e; ++i) {
      const float* x = j.x + i * d;
      float* y = j.y + i * d;
      double s = 0;
      for (int64_t k = 0; k < d; ++k) s += double(x[k]) * x[k];
      j.ms[i] = s / d;
      float inv = 1.f / std::sqrt(float(s / d) + float(j.r->eps));
      j.inv[i] = inv;
      for (int64_t k = 0; k < d; ++k) y[k] = x[k] * inv * (j.w ? j.w[k] : 1.f);
    }
  }, &j);
  if (run->training && io->stats) {
    double s = 0;
    for (int64_t i = 0; i < rows; ++i) s += j.ms[i];
    io->stats[0] = rows ? float(s / rows) : 0.f;
  }
  return 0;
}

int backward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char*, size_t) {
  auto* r = static_cast<const RmsNorm*>(instance);
  int64_t rows = rows_of(io->inputs[0], r->dim), d = r->dim;
  Job j{r, static_cast<const float*>(io->inputs[0].data), static_cast<const float*>(io->grad_output.data),
        r->affine ? io->params : nullptr, nullptr, static_cast<float*>(io->grad_inputs[0].data),
        static_cast<float*>(api->scratch(run, 0, static_cast<size_t>(rows) * sizeof(float))), nullptr};
  if (j.gx)
    api->parallel_for(run, rows, 16, [](void* p, int64_t b, int64_t e) {
      auto& j = *static_cast<Job*>(p);
      int64_t d = j.r->dim;
      for (int64_t i = b; i < e; ++i) {
        const float *x = j.x + i * d, *g = j.g + i * d;
        float inv = j.inv[i], *gx = j.gx + i * d;
        double dot = 0;  // mean(gy * xhat)
        for (int64_t k = 0; k < d; ++k) dot += double(g[k]) * (j.w ? j.w[k] : 1.f) * x[k] * inv;
        float m = float(dot / d);
        for (int64_t k = 0; k < d; ++k) gx[k] = inv * (g[k] * (j.w ? j.w[k] : 1.f) - x[k] * inv * m);
      }
    }, &j);
  if (r->affine)  // serial over rows: the same sum whatever the workers
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t k = 0; k < d; ++k) io->grads[k] += j.g[i * d + k] * j.x[i * d + k] * j.inv[i];
  return 0;
}

void merge_stats(const void* instance, float* buffers, const float* const* stats, const int64_t* counts,
                 int32_t replicas) {
  auto* r = static_cast<const RmsNorm*>(instance);
  double s = 0, n = 0;
  for (int32_t k = 0; k < replicas; ++k) s += double(stats[k][0]) * counts[k], n += double(counts[k]);
  if (n > 0) buffers[0] = float((1 - r->momentum) * buffers[0] + r->momentum * (s / n));
}

}  // namespace

extern "C" DP_PLUGIN_EXPORT int dp_plugin_init(const dp_host_api_base* base, char* err, size_t cap) {
  api = base->get_api(base, 1); /* CPU code only: version 1 loads on every dp */
  if (!api) return std::snprintf(err, cap, "rms_norm needs dp host API version 1"), 1;
  dp_plugin_layer_type t{};
  t.struct_size = sizeof t;
  t.name = "rms_norm";
  t.version = 1;
  t.min_inputs = t.max_inputs = 1;
  t.create = create;
  t.destroy = destroy;
  t.infer = infer;
  t.forward = forward;
  t.backward = backward;
  t.merge_stats = merge_stats;
  return api->register_layer(base->registrar, &t);
}
