/* Trains a few steps through dp, built as a subproject. */
#include <stdio.h>

#include <dp.h>

int main(void) {
  dp_context* ctx = NULL;
  dp_model* model = NULL;
  dp_group* group = NULL;
  dp_optimizer* opt = NULL;
  dp_tensor *x = NULL, *y = NULL;
  float xs[8] = {0, 0, 0, 1, 1, 0, 1, 1};
  int64_t ys[4] = {0, 1, 1, 0}, xshape[2] = {4, 2}, yshape[1] = {4};
  float first = 0, loss = 0;
  int step, ok;
  ok = dp_context_create(&ctx) == DP_OK &&
       dp_model_from_json(ctx,
                          "{\"seed\": 0, \"input\": {\"shape\": [2]}, \"layers\": [{\"type\": \"linear\", "
                          "\"out_features\": 8}, {\"type\": \"tanh\"}, {\"type\": \"linear\", \"out_features\": 2}], "
                          "\"loss\": {\"type\": \"cross_entropy\"}}",
                          &model) == DP_OK &&
       dp_group_create(model, "cpu:0,cpu:1", &group) == DP_OK &&
       dp_optimizer_create(group, "{\"type\": \"adam\", \"lr\": 0.05}", &opt) == DP_OK &&
       dp_tensor_from_host(ctx, DP_F32, xs, 2, xshape, &x) == DP_OK &&
       dp_tensor_from_host(ctx, DP_I64, ys, 1, yshape, &y) == DP_OK;
  for (step = 0; ok && step < 100; ++step) {
    ok = dp_group_train_step(group, opt, x, y, &loss) == DP_OK;
    if (step == 0) first = loss;
  }
  if (!ok) fprintf(stderr, "%s\n", dp_last_error());
  else printf("dp %s as a subproject: loss %.4f -> %.4f\n", dp_version(), first, loss);
  dp_tensor_destroy(x);
  dp_tensor_destroy(y);
  dp_optimizer_destroy(opt);
  dp_group_destroy(group);
  dp_model_destroy(model);
  dp_context_destroy(ctx);
  return ok && loss < first ? 0 : 1;
}
