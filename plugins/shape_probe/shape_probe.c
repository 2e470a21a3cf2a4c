/* shape_probe: prints, from inside each replica's forward, the tutorial's
 *   \tIn Model: input size [15, 5] output size [15, 2]
 * and passes its last input through unchanged. With one input it reports
 * that input as both; with two ("inputs": ["input", "fc"]) it reports the
 * model's input and the layer's, as the tutorial's model does. Replicas run
 * at once, so the order of their lines is not fixed; each line is written by
 * one fputs call (stdio locks the stream), so lines never interleave. */
#include <stdio.h>
#include <string.h>

#include "dp_plugin.h"

static const dp_host_api* api;
static int loud, quiet; /* the instances: stateless but for "quiet" */

/* "quiet": true prints nothing (for tests of the layer itself). */
static int create(void* user, dp_plugin_args* args, void** instance, char* err, size_t cap) {
  int q = 0;
  (void)user, (void)err, (void)cap;
  if (api->args_bool(args, "quiet", 0, &q)) return 1;
  *instance = q ? &quiet : &loud;
  return 0;
}

static int infer(void* instance, dp_plugin_build* build, const dp_plugin_shape* in, int32_t n, dp_plugin_shape* out,
                 char* err, size_t cap) {
  (void)instance, (void)build, (void)err, (void)cap;
  *out = in[n - 1];
  return 0;
}

static size_t put_shape(char* s, size_t cap, const dp_plugin_tensor* t) {
  size_t len = 0;
  int i;
  len += (size_t)snprintf(s + len, cap - len, "[");
  for (i = 0; i < t->ndim && len < cap; ++i)
    len += (size_t)snprintf(s + len, cap - len, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (len < cap) len += (size_t)snprintf(s + len, cap - len, "]");
  return len;
}

static int forward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  char line[512];
  size_t len = 0;
  const dp_plugin_tensor* last = &io->inputs[io->num_inputs - 1];
  (void)run, (void)err, (void)cap;
  memcpy(io->output.data, last->data, (size_t)dp_plugin_numel(last) * sizeof(float));
  if (instance == &quiet) return 0;
  len += (size_t)snprintf(line + len, sizeof line - len, "\tIn Model: input size ");
  len += put_shape(line + len, sizeof line - len, &io->inputs[0]);
  len += (size_t)snprintf(line + len, sizeof line - len, " output size ");
  len += put_shape(line + len, sizeof line - len, last);
  if (len < sizeof line - 1) line[len++] = '\n', line[len] = 0;
  fputs(line, stdout);
  return 0;
}

static int backward(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap) {
  int i;
  (void)instance, (void)run, (void)err, (void)cap;
  for (i = 0; i < io->num_inputs; ++i) {
    const dp_plugin_tensor* g = &io->grad_inputs[i];
    if (!g->data) continue;
    if (i == io->num_inputs - 1)
      memcpy(g->data, io->grad_output.data, (size_t)dp_plugin_numel(g) * sizeof(float));
    else
      memset(g->data, 0, (size_t)dp_plugin_numel(g) * sizeof(float));
  }
  return 0;
}

DP_PLUGIN_EXPORT int dp_plugin_init(const dp_host_api_base* base, char* err, size_t cap) {
  dp_plugin_layer_type t;
  memset(&t, 0, sizeof t);
  api = base->get_api(base, 1); /* CPU code only: version 1 loads on every dp */
  if (!api) return snprintf(err, cap, "shape_probe needs dp host API version 1"), 1;
  t.struct_size = sizeof t;
  t.name = "shape_probe";
  t.version = 1;
  t.min_inputs = 1;
  t.max_inputs = 2;
  t.create = create;
  t.infer = infer;
  t.forward = forward;
  t.backward = backward;
  return api->register_layer(base->registrar, &t);
}
