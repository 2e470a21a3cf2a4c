/* swish: y = x * sigmoid(beta * x), beta a learnable scalar ("<name>.beta",
 * initialised to 1), as the Swish of Ramachandran et al. (SiLU at beta = 1).
 * Any input shape; no hyperparameters. Built against dp_plugin.h only.
 * Built with SWISH_CUDA (plugins/meson.build, when dp has CUDA) it also
 * brings CUDA forward and backward (swish_cuda.cu) and asks for host API
 * version 2; without, it asks for version 1 and loads on any dp. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dp_plugin.h"
#ifdef SWISH_CUDA
#include "swish_cuda.h"
#define SWISH_API_VERSION 2
#else
#define SWISH_API_VERSION 1
#endif

static const dp_host_api* api;

typedef struct {
  int unused;
} swish;

static int create(void* user, dp_plugin_args* args, void** instance, char* err, size_t cap) {
  (void)user, (void)args;
  swish* s = calloc(1, sizeof *s);
  if (!s) return snprintf(err, cap, "out of memory"), 1;
  *instance = s;
  return 0;
}

static void destroy(void* instance) { free(instance); }

static int infer(void* instance, dp_plugin_build* build, const dp_plugin_shape* in, int32_t n, dp_plugin_shape* out,
                 char* err, size_t cap) {
  int64_t one = 1;
  (void)instance, (void)n, (void)err, (void)cap;
  *out = in[0];
  return api->declare_param(build, "beta", 1, &one, DP_PLUGIN_INIT_ONES, 0);
}

typedef struct {
  const float *x, *g;
  float *y, *gx;
  float beta;
} job;

static void forward_range(void* p, int64_t b, int64_t e) {
  const job* j = p;
  int64_t i;
  for (i = b; i < e; ++i) j->y[i] = j->x[i] / (1.f + expf(-j->beta * j->x[i]));
}

static int forward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  job j;
  (void)instance, (void)err, (void)cap;
  j.x = io->inputs[0].data;
  j.y = io->output.data;
  j.beta = io->params[0];
  api->parallel_for(run, dp_plugin_numel(&io->output), 4096, forward_range, &j);
  return 0;
}

static void backward_range(void* p, int64_t b, int64_t e) {
  const job* j = p;
  int64_t i;
  for (i = b; i < e; ++i) {
    float x = j->x[i], s = 1.f / (1.f + expf(-j->beta * x));
    j->gx[i] = j->g[i] * (s + j->beta * x * s * (1.f - s));
  }
}

static int backward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  const float* x = io->inputs[0].data;
  const float* g = io->grad_output.data;
  float beta = io->params[0];
  double dbeta = 0;
  int64_t i, n = dp_plugin_numel(&io->grad_output);
  (void)instance, (void)err, (void)cap;
  if (io->grad_inputs[0].data) {
    job j;
    j.x = x, j.g = g, j.gx = io->grad_inputs[0].data, j.beta = beta;
    api->parallel_for(run, n, 4096, backward_range, &j);
  }
  for (i = 0; i < n; ++i) { /* serial: the same sum whatever the workers */
    float s = 1.f / (1.f + expf(-beta * x[i]));
    dbeta += (double)g[i] * x[i] * x[i] * s * (1.f - s);
  }
  io->grads[0] += (float)dbeta;
  return 0;
}

#ifdef SWISH_CUDA
static int cuda_forward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  (void)instance;
  return swish_cuda_forward(api, run, io, err, cap);
}
static int cuda_backward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  (void)instance;
  return swish_cuda_backward(api, run, io, err, cap);
}
#endif

DP_PLUGIN_EXPORT int dp_plugin_init(const dp_host_api_base* base, char* err, size_t cap) {
  dp_plugin_layer_type t = {0};
#ifdef SWISH_CUDA
  dp_plugin_device_impls cuda = {0};
#endif
  api = base->get_api(base, SWISH_API_VERSION);
  if (!api) return snprintf(err, cap, "swish needs dp host API version %d", SWISH_API_VERSION), 1;
  t.struct_size = sizeof t;
  t.name = "swish";
  t.version = 1;
  t.min_inputs = t.max_inputs = 1;
  t.create = create;
  t.destroy = destroy;
  t.infer = infer;
  t.forward = forward;
  t.backward = backward;
#ifdef SWISH_CUDA
  cuda.struct_size = sizeof cuda;
  cuda.cuda_forward = cuda_forward;
  cuda.cuda_backward = cuda_backward;
  t.device_impls = &cuda; /* copied by register_layer */
#endif
  return api->register_layer(base->registrar, &t);
}
