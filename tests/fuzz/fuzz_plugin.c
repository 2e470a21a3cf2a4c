/* The plugin of the plugin-arguments fuzz target (fuzz_plugin_args.cpp): one
 * layer type, "fuzz_args", whose create hands the host's table and the
 * arguments to a function the fuzz target installs (dp_fuzz_set_create), so
 * that the target can call the args_* accessors as a plugin does. The layer
 * itself is the identity. Test-only: it exports a second symbol. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_plugin.h"

typedef int (*fuzz_create_fn)(void* ctx, const dp_host_api* api, dp_plugin_args* args, char* err, size_t cap);

static const dp_host_api* api;
static fuzz_create_fn hook;
static void* hook_ctx;

DP_PLUGIN_EXPORT void dp_fuzz_set_create(fuzz_create_fn fn, void* ctx) {
  hook = fn;
  hook_ctx = ctx;
}

static int create(void* user, dp_plugin_args* args, void** instance, char* err, size_t cap) {
  int rc;
  (void)user;
  if (!hook) return snprintf(err, cap, "no create hook installed"), 1;
  rc = hook(hook_ctx, api, args, err, cap);
  if (rc) return rc;
  *instance = malloc(1);
  return *instance ? 0 : (snprintf(err, cap, "out of memory"), 1);
}

static void destroy(void* instance) { free(instance); }

static int infer(void* instance, dp_plugin_build* build, const dp_plugin_shape* in, int32_t n, dp_plugin_shape* out,
                 char* err, size_t cap) {
  (void)instance, (void)build, (void)n, (void)err, (void)cap;
  *out = in[0];
  return 0;
}

static int forward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  (void)instance, (void)run, (void)err, (void)cap;
  memcpy(io->output.data, io->inputs[0].data, (size_t)dp_plugin_numel(&io->output) * sizeof(float));
  return 0;
}

static int backward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  (void)instance, (void)run, (void)err, (void)cap;
  if (io->grad_inputs[0].data)
    memcpy(io->grad_inputs[0].data, io->grad_output.data, (size_t)dp_plugin_numel(&io->grad_output) * sizeof(float));
  return 0;
}

DP_PLUGIN_EXPORT int dp_plugin_init(const dp_host_api_base* base, char* err, size_t cap) {
  dp_plugin_layer_type t;
  api = base->get_api(base, 1); /* CPU code only: version 1 loads on every dp */
  if (!api) return snprintf(err, cap, "needs host API 1"), 1;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.name = "fuzz_args";
  t.version = 1;
  t.min_inputs = 1;
  t.max_inputs = 1;
  t.create = create;
  t.destroy = destroy;
  t.infer = infer;
  t.forward = forward;
  t.backward = backward;
  return api->register_layer(base->registrar, &t);
}
