/* The tutorial's toy, through dp's C ABI: a random dataset of 100 samples of
 * size 5, batches of 30 in shuffled order, one linear layer 5 -> 2, run over
 * the devices given as the argument (default: cpu:0,cpu:1).
 *
 *   toy cpu:0,cpu:1,cpu:2
 *
 * Each replica's "In Model" line reports the rows that device ran, from
 * dp_group_last_split (printed after the parallel forward, in device order). */
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char** argv) {
  const char* devices = argc > 1 ? argv[1] : "cpu:0,cpu:1";
  const char* json =
      "{\"seed\": 0, \"input\": {\"shape\": [5]},"
      " \"layers\": [{\"type\": \"linear\", \"out_features\": 2, \"name\": \"fc\"}]}";
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

  if (check(dp_context_create(&ctx), "context") || check(dp_model_from_json(ctx, json, &model), "model") ||
      check(dp_group_create(model, devices, &group), "devices") || check(dp_group_num_devices(group, &n_devices), "devices"))
    goto done;
  if (n_devices > 1) printf("Let's use %d devices!\n", n_devices);

  for (i = 0; i < DATA_SIZE; i += BATCH_SIZE) {
    int rows = DATA_SIZE - i < BATCH_SIZE ? DATA_SIZE - i : BATCH_SIZE, count = 0, r;
    int64_t shape[2], sizes[64], out_shape[DP_MAX_DIMS];
    int out_ndim = 0;
    dp_tensor *input = NULL, *output = NULL;
    for (r = 0; r < rows; ++r)
      for (j = 0; j < INPUT_SIZE; ++j) batch[r][j] = data[order[i + r]][j];
    shape[0] = rows;
    shape[1] = INPUT_SIZE;
    if (check(dp_tensor_from_host(ctx, DP_F32, batch, 2, shape, &input), "input") ||
        check(dp_group_forward(group, input, &output), "forward") ||
        check(dp_group_last_split(group, sizes, 64, &count), "split") ||
        check(dp_tensor_shape(output, &out_ndim, out_shape), "output")) {
      dp_tensor_destroy(input);
      dp_tensor_destroy(output);
      goto done;
    }
    for (r = 0; r < count; ++r)
      printf("\tIn Model: input size [%lld, %d] output size [%lld, %d]\n", (long long)sizes[r], INPUT_SIZE,
             (long long)sizes[r], OUTPUT_SIZE);
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
