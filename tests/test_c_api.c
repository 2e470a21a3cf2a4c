/* A pure C99 program that uses only dp.h: builds with -std=c99 -pedantic
 * -Werror, trains a small model on two devices, and checks error reporting. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dp.h"

static int failures = 0, passes = 0;
#define EXPECT(cond)                                                             \
  do {                                                                           \
    if (cond) {                                                                  \
      ++passes;                                                                  \
    } else {                                                                     \
      ++failures;                                                                \
      fprintf(stderr, "%s:%d: failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, dp_last_error()); \
    }                                                                            \
  } while (0)

int main(void) {
  const char* json =
      "{\"seed\": 7, \"input\": {\"shape\": [2]},"
      " \"layers\": [{\"type\": \"linear\", \"out_features\": 16}, {\"type\": \"tanh\"},"
      "              {\"type\": \"linear\", \"out_features\": 2}],"
      " \"loss\": {\"type\": \"cross_entropy\"}}";
  dp_context* ctx = NULL;
  dp_model* model = NULL;
  dp_group* group = NULL;
  dp_optimizer* opt = NULL;
  dp_tensor *x = NULL, *y = NULL, *out = NULL;
  float data[64 * 2];
  int64_t labels[64];
  int64_t xs[2] = {64, 2}, ys[1] = {64}, sizes[8];
  float first = 0, loss = 0;
  int i, count = 0;
  int64_t nparams = 0;

  EXPECT(dp_context_create(&ctx) == DP_OK);
  EXPECT(dp_model_from_json(ctx, json, &model) == DP_OK);
  EXPECT(dp_model_num_parameters(model, &nparams) == DP_OK && nparams == 2 * 16 + 16 + 16 * 2 + 2);
  EXPECT(dp_group_create(model, "cpu:0,cpu:1", &group) == DP_OK);
  EXPECT(dp_optimizer_create(group, "{\"type\": \"adam\", \"lr\": 0.05}", &opt) == DP_OK);

  /* Two interleaved classes: inside or outside the unit circle. */
  for (i = 0; i < 64; ++i) {
    float r = (i % 2) ? 0.5f : 1.5f, a = (float)i * 0.7f;
    data[2 * i] = r * (float)cos(a);
    data[2 * i + 1] = r * (float)sin(a);
    labels[i] = i % 2;
  }
  EXPECT(dp_tensor_from_host(ctx, DP_F32, data, 2, xs, &x) == DP_OK);
  EXPECT(dp_tensor_from_host(ctx, DP_I64, labels, 1, ys, &y) == DP_OK);
  EXPECT(dp_group_train_step(group, opt, x, y, &first) == DP_OK);
  for (i = 0; i < 200; ++i) EXPECT(dp_group_train_step(group, opt, x, y, &loss) == DP_OK);
  EXPECT(loss < 0.1f * first);
  EXPECT(dp_group_last_split(group, sizes, 8, &count) == DP_OK && count == 2 && sizes[0] == 32 && sizes[1] == 32);

  EXPECT(dp_group_forward(group, x, &out) == DP_OK);
  {
    int nd = 0;
    int64_t shape[DP_MAX_DIMS];
    EXPECT(dp_tensor_shape(out, &nd, shape) == DP_OK && nd == 2 && shape[0] == 64 && shape[1] == 2);
  }

  /* Errors: a status, a message, the out-parameter untouched. */
  {
    dp_model* bad = NULL;
    EXPECT(dp_model_from_json(ctx, "{\"input\": {\"shape\": [2]}, \"layers\": [{\"type\": \"conv3d\"}]}", &bad) == DP_ERR_MODEL);
    EXPECT(strstr(dp_last_error(), "unknown layer type 'conv3d' at /layers/0/type") != NULL);
    EXPECT(bad == NULL);
    EXPECT(dp_group_forward(group, y, &out) == DP_ERR_SHAPE);
  }

  dp_tensor_destroy(out);
  dp_tensor_destroy(x);
  dp_tensor_destroy(y);
  dp_optimizer_destroy(opt);
  dp_group_destroy(group);
  dp_model_destroy(model);
  dp_context_destroy(ctx);
  dp_context_destroy(NULL);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
