/* The tutorial's toy, through dp's C ABI: a random dataset of 100 samples of
 * size 5, batches of 30 in shuffled order, one linear layer 5 -> 2, run over
 * the devices given as the first argument (default: cpu:0,cpu:1).
 *
 *   toy cpu:0,cpu:1,cpu:2 [path/to/shape_probe.so]
 *
 * As in the tutorial, each replica prints its "In Model" line from inside its
 * own forward: the model ends with the shape_probe plugin
 * (plugins/shape_probe), which takes the model's input and the linear
 * layer's output. The plugin is the second argument, else "shape_probe" in
 * DP_PLUGIN_PATH, else ../plugins/shape_probe.so next to this program (the
 * build tree's layout). Replicas run at once, so within a batch their lines
 * come in any order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp.h"

enum { INPUT_SIZE = 5, OUTPUT_SIZE = 2, BATCH_SIZE = 30, DATA_SIZE = 100 };

static uint64_t rng_state = 42;
static double next_uniform(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

static int check(dp_status s, const char* what) {
  if (s != DP_OK) fprintf(stderr, "toy: %s: %s\n", what, dp_last_error());
  return s != DP_OK;
}

/* Loads shape_probe: the given path, else DP_PLUGIN_PATH, else next to argv0. */
static dp_status load_probe(dp_context* ctx, const char* given, const char* argv0) {
  static char path[4096];
  const char* slash;
  if (given) return dp_context_load_plugin(ctx, given);
  if (getenv("DP_PLUGIN_PATH") && dp_context_load_plugin(ctx, "shape_probe") == DP_OK) return DP_OK;
  slash = strrchr(argv0, '/');
  snprintf(path, sizeof path, "%.*s../plugins/shape_probe.so", slash ? (int)(slash - argv0 + 1) : 0, argv0);
  if (!slash) snprintf(path, sizeof path, "../plugins/shape_probe.so");
  return dp_context_load_plugin(ctx, path);
}

int main(int argc, char** argv) {
  const char* devices = argc > 1 ? argv[1] : "cpu:0,cpu:1";
  const char* json =
      "{\"seed\": 0, \"input\": {\"shape\": [5]},"
      " \"layers\": [{\"type\": \"linear\", \"out_features\": 2, \"name\": \"fc\"},"
      "              {\"type\": \"shape_probe\", \"inputs\": [\"input\", \"fc\"]}]}";
  static float data[DATA_SIZE][INPUT_SIZE];
  static float batch[BATCH_SIZE][INPUT_SIZE];
  int order[DATA_SIZE];
  dp_context* ctx = NULL;
  dp_model* model = NULL;
  dp_group* group = NULL;
  int i, j, n_devices = 0, status = 1;

  for (i = 0; i < DATA_SIZE; ++i)
    for (j = 0; j < INPUT_SIZE; ++j) data[i][j] = (float)(next_uniform() * 2 - 1);
  for (i = 0; i < DATA_SIZE; ++i) order[i] = i;
  for (i = DATA_SIZE - 1; i > 0; --i) { /* shuffle, as DataLoader(shuffle=True) */
    int k = (int)(next_uniform() * (i + 1)), t = order[i];
    order[i] = order[k];
    order[k] = t;
  }

  if (check(dp_context_create(&ctx), "context") || check(load_probe(ctx, argc > 2 ? argv[2] : NULL, argv[0]), "plugin") ||
      check(dp_model_from_json(ctx, json, &model), "model") ||
      check(dp_group_create(model, devices, &group), "devices") || check(dp_group_num_devices(group, &n_devices), "devices"))
    goto done;
  if (n_devices > 1) printf("Let's use %d devices!\n", n_devices);

  for (i = 0; i < DATA_SIZE; i += BATCH_SIZE) {
    int rows = DATA_SIZE - i < BATCH_SIZE ? DATA_SIZE - i : BATCH_SIZE, r;
    int64_t shape[2], out_shape[DP_MAX_DIMS];
    int out_ndim = 0;
    dp_tensor *input = NULL, *output = NULL;
    for (r = 0; r < rows; ++r)
      for (j = 0; j < INPUT_SIZE; ++j) batch[r][j] = data[order[i + r]][j];
    shape[0] = rows;
    shape[1] = INPUT_SIZE;
    if (check(dp_tensor_from_host(ctx, DP_F32, batch, 2, shape, &input), "input") ||
        check(dp_group_forward(group, input, &output), "forward") || /* the replicas print */
        check(dp_tensor_shape(output, &out_ndim, out_shape), "output")) {
      dp_tensor_destroy(input);
      dp_tensor_destroy(output);
      goto done;
    }
    printf("Outside: input size [%lld, %d] output_size [%lld, %lld]\n", (long long)shape[0], INPUT_SIZE,
           (long long)out_shape[0], (long long)out_shape[1]);
    dp_tensor_destroy(input);
    dp_tensor_destroy(output);
  }
  status = 0;
done:
  dp_group_destroy(group);
  dp_model_destroy(model);
  dp_context_destroy(ctx);
  return status;
}
