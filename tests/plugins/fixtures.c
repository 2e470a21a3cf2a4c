/* Small plugins for the load-failure tests and the overhead benchmark, one
 * per FIXTURE_* macro (tests/plugins/meson.build builds each). They ask for
 * host API version 1, as a plugin built against version 1's header does,
 * except the FIXTURE_V2_* ones and FIXTURE_V1_DEVICE_IMPLS (device code), and
 * FIXTURE_CUDA_RELU (with FIXTURE_PLUGIN_RELU: the benchmark's relu with CUDA
 * code from bench/plugin_relu_cuda.cu). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_plugin.h"

#if defined(FIXTURE_V2_RELU) || defined(FIXTURE_V2_HALF_IMPLS) || defined(FIXTURE_V2_SMALL_IMPLS) || \
    defined(FIXTURE_CUDA_RELU)
#define FIXTURE_API 2
#else
#define FIXTURE_API 1
#endif
#if defined(FIXTURE_V2_RELU) || defined(FIXTURE_V2_HALF_IMPLS) || defined(FIXTURE_V2_SMALL_IMPLS) || \
    defined(FIXTURE_V1_DEVICE_IMPLS) || defined(FIXTURE_CUDA_RELU)
#define FIXTURE_DEVICE_CODE 1
#endif

static const dp_host_api* api;
static int tag;
static dp_plugin_registrar* base_registrar;

static int create(void* user, dp_plugin_args* args, void** instance, char* err, size_t cap) {
  (void)user, (void)args, (void)err, (void)cap;
  *instance = &tag;
#if defined(FIXTURE_FAILS_FORWARD)
  {
    double limit = 0;
    float* p;
    if (api->args_float(args, "max_input", 1e30, -1e30, 1e30, &limit)) return 1;
    p = malloc(sizeof *p);
    if (!p) return 1;
    *p = (float)limit;
    *instance = p;
  }
#endif
  return 0;
}
static int infer(void* instance, dp_plugin_build* build, const dp_plugin_shape* in, int32_t n, dp_plugin_shape* out,
                 char* err, size_t cap) {
  (void)instance, (void)build, (void)n, (void)err, (void)cap;
  *out = in[0];
  return 0;
}
/* relu (plugin_relu) or identity that fails on large inputs (fails_forward). */
static int forward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  /* restrict, and selects rather than branches: written as the built-in is, so
   * bench/plugin_relu measures the plugin ABI, not two ways to write a loop. */
  const float* restrict x = io->inputs[0].data;
  float* restrict y = io->output.data;
  int64_t i, n = dp_plugin_numel(&io->output);
  (void)instance, (void)run, (void)err, (void)cap;
#if defined(FIXTURE_V2_RELU)
  /* Version 2's run fields and views, as a CPU replica gives them. */
  if (run->struct_size < offsetof(dp_plugin_run, stream) + sizeof run->stream)
    return snprintf(err, cap, "dp_plugin_run of %zu bytes lacks version 2's fields", run->struct_size), 1;
  if (run->device_type != DP_PLUGIN_DEVICE_CPU || run->device_index != 0 || run->stream != NULL)
    return snprintf(err, cap, "on a CPU: device_type %d, device_index %d, stream %p", (int)run->device_type,
                    (int)run->device_index, run->stream), 1;
  if (io->inputs[0].device_type != DP_PLUGIN_DEVICE_CPU || io->output.device_type != DP_PLUGIN_DEVICE_CPU)
    return snprintf(err, cap, "a CPU replica's tensor views should say DP_PLUGIN_DEVICE_CPU"), 1;
#endif
#if defined(FIXTURE_FAILS_FORWARD)
  for (i = 0; i < n; ++i)
    if (x[i] > *(const float*)instance)
      return snprintf(err, cap, "input %g exceeds max_input %g", (double)x[i], (double)*(const float*)instance), 1;
  memcpy(y, x, (size_t)n * sizeof(float));
#else
  for (i = 0; i < n; ++i) y[i] = x[i] < 0.f ? 0.f : x[i];
#endif
  return 0;
}
static int backward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  const float* restrict x = io->inputs[0].data;
  const float* restrict g = io->grad_output.data;
  float* restrict gx = io->grad_inputs[0].data;
  int64_t i, n = dp_plugin_numel(&io->grad_output);
  (void)instance, (void)run, (void)err, (void)cap;
  if (!gx) return 0;
#if defined(FIXTURE_FAILS_FORWARD)
  (void)x, (void)i;
  memcpy(gx, g, (size_t)n * sizeof(float));
#else
  for (i = 0; i < n; ++i) gx[i] = g[i] * (x[i] > 0.f ? 1.f : 0.f);
#endif
  return 0;
}

#if defined(FIXTURE_PRELU)
/* nn.PReLU: y = x > 0 ? x : w[c] * x, w[c] starting at a constant (0.25);
 * one weight, or one per channel (dim 1 of the input). JSON: num_parameters
 * (args_int_range: [1, 4096]), init (the constant); init_kind and
 * init_bound override the declaration, to test the host's checks. */
typedef struct {
  int64_t n, inner;
  double init, bound;
  int64_t kind;
} prelu_t;
static int prelu_create(void* user, dp_plugin_args* args, void** instance, char* err, size_t cap) {
  prelu_t* p = calloc(1, sizeof *p);
  (void)user;
  if (!p) return snprintf(err, cap, "out of memory"), 1;
  *instance = p;
  if (!DP_PLUGIN_HAS(api, args_int_range)) return snprintf(err, cap, "host lacks args_int_range"), 1;
  if (api->args_int_range(args, "num_parameters", 1, 1, 4096, &p->n) ||
      api->args_float(args, "init", 0.25, -1e6, 1e6, &p->init) ||
      api->args_int(args, "init_kind", DP_PLUGIN_INIT_CONSTANT, -100, &p->kind) ||
      api->args_float(args, "init_bound", -1e300, -1e300, 1e300, &p->bound))
    return 1;
  return 0;
}
static int prelu_infer(void* instance, dp_plugin_build* build, const dp_plugin_shape* in, int32_t n, dp_plugin_shape* out,
                       char* err, size_t cap) {
  prelu_t* p = instance;
  int32_t i;
  (void)n;
  if (p->n > 1 && (in[0].ndim < 1 || in[0].dims[0] != p->n))
    return snprintf(err, cap, "num_parameters %lld must be 1 or the channels (dim 1), got input of %d dims", (long long)p->n,
                    (int)in[0].ndim), 1;
  p->inner = 1;
  for (i = p->n > 1 ? 1 : 0; i < in[0].ndim; ++i) p->inner *= in[0].dims[i];
  *out = in[0];
  return api->declare_param(build, "weight", 1, &p->n, (int32_t)p->kind, p->bound > -1e300 ? p->bound : p->init);
}
static int prelu_forward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  const prelu_t* p = instance;
  const float* x = io->inputs[0].data;
  float* y = io->output.data;
  int64_t i, total = dp_plugin_numel(&io->output);
  (void)run, (void)err, (void)cap;
  for (i = 0; i < total; ++i) {
    const float w = io->params[(i / p->inner) % p->n];
    y[i] = x[i] > 0.f ? x[i] : w * x[i];
  }
  return 0;
}
static int prelu_backward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  const prelu_t* p = instance;
  const float* x = io->inputs[0].data;
  const float* g = io->grad_output.data;
  float* gx = io->grad_inputs[0].data;
  int64_t i, total = dp_plugin_numel(&io->grad_output);
  (void)run, (void)err, (void)cap;
  for (i = 0; i < total; ++i) {
    const int64_t c = (i / p->inner) % p->n;
    if (gx) gx[i] = x[i] > 0.f ? g[i] : io->params[c] * g[i];
    if (x[i] <= 0.f) io->grads[c] += g[i] * x[i];
  }
  return 0;
}
#endif

#if defined(FIXTURE_CUDA_RELU)
int relu_cuda_forward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap);
int relu_cuda_backward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap);
#define FIXTURE_CUDA_FORWARD relu_cuda_forward
#define FIXTURE_CUDA_BACKWARD relu_cuda_backward
#elif defined(FIXTURE_DEVICE_CODE)
/* The CUDA entries of the device-code fixtures: a CPU group must never call them. */
static int cuda_not_here(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  (void)instance;
  /* What it was given, for the GPU test of a failing CUDA entry (cuda_group). */
  return snprintf(err, cap, "the CUDA entry was called on device type %d, index %d, stream %s, input on device type %d",
                  (int)run->device_type, (int)run->device_index, run->stream ? "set" : "NULL",
                  (int)io->inputs[0].device_type),
         1;
}
#define FIXTURE_CUDA_FORWARD cuda_not_here
#define FIXTURE_CUDA_BACKWARD cuda_not_here
#endif

#if !defined(FIXTURE_NO_INIT) && !defined(FIXTURE_WRONG_VERSION)
static int add(const char* name) {
  dp_plugin_layer_type t;
#if defined(FIXTURE_DEVICE_CODE)
  dp_plugin_device_impls impls; /* on the stack: register_layer copies it */
  memset(&impls, 0, sizeof impls);
  impls.struct_size = sizeof impls;
  impls.cuda_forward = FIXTURE_CUDA_FORWARD;
  impls.cuda_backward = FIXTURE_CUDA_BACKWARD;
#if defined(FIXTURE_V2_HALF_IMPLS)
  impls.cuda_backward = NULL;
#elif defined(FIXTURE_V2_SMALL_IMPLS)
  impls.struct_size = sizeof(size_t);
#endif
#endif
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.name = name;
  t.version = 7;
  t.min_inputs = t.max_inputs = 1;
  t.create = create;
#if defined(FIXTURE_FAILS_FORWARD)
  t.destroy = free;
#endif
  t.infer = infer;
  t.forward = forward;
  t.backward = backward;
#if defined(FIXTURE_DEVICE_CODE)
  t.device_impls = &impls;
#endif
#if defined(FIXTURE_PRELU)
  t.create = prelu_create;
  t.destroy = free;
  t.infer = prelu_infer;
  t.forward = prelu_forward;
  t.backward = prelu_backward;
#endif
  return api->register_layer(base_registrar, &t);
}
#endif

#if defined(FIXTURE_NO_INIT)
DP_PLUGIN_EXPORT int not_the_init(void) { return 0; }
#else
DP_PLUGIN_EXPORT int dp_plugin_init(const dp_host_api_base* base, char* err, size_t cap) {
#if defined(FIXTURE_WRONG_VERSION)
  api = base->get_api(base, 99);
  if (!api) return snprintf(err, cap, "needs host API 99"), 1;
  return 0;
#else
  api = base->get_api(base, FIXTURE_API);
  if (!api) return snprintf(err, cap, "needs host API %d", FIXTURE_API), 1;
  if (api->version != FIXTURE_API) return snprintf(err, cap, "asked for table %d, got %u", FIXTURE_API, api->version), 1;
  base_registrar = base->registrar;
#if defined(FIXTURE_INIT_FAILS)
  if (add("fixture_half")) return snprintf(err, cap, "unexpected"), 1;
  return snprintf(err, cap, "refusing to load on purpose"), 1;
#elif defined(FIXTURE_DUP_BUILTIN)
  if (add("fixture_dup_first")) return 1;
  return add("relu");
#elif defined(FIXTURE_DUP_SWISH)
  if (add("fixture_dup_second")) return 1;
  return add("swish");
#elif defined(FIXTURE_FAILS_FORWARD)
  return add("fails_forward");
#elif defined(FIXTURE_PRELU)
  return add("fixture_prelu");
#elif defined(FIXTURE_BAD_NAME)
  if (add("fixture_fine")) return 1;
  return add("has space");
#elif defined(FIXTURE_V2_RELU)
  return add("fixture_v2_relu");
#elif defined(FIXTURE_V1_DEVICE_IMPLS) || defined(FIXTURE_V2_HALF_IMPLS) || defined(FIXTURE_V2_SMALL_IMPLS)
  return add("fixture_device_bad");
#else /* FIXTURE_PLUGIN_RELU */
  return add("plugin_relu");
#endif
#endif
}
#endif
