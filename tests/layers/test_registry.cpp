#include "common.h"

using namespace dp;
using namespace dp::test;

TEST_CASE("registry lists every built-in, sorted") {
  Registry r;
  CHECK(r.layer_names() ==
        "add, avg_pool2d, batch_norm, batch_norm1d, batch_norm2d, concat, conv2d, dropout, flatten, gelu, "
        "global_avg_pool, layer_norm, leaky_relu, linear, log_softmax, max_pool2d, relu, sigmoid, softmax, tanh");
  CHECK(r.loss_names() == "bce, bce_with_logits, cross_entropy, huber, l1, mse, nll, smooth_l1");
  CHECK((r.layer("conv2d") != nullptr));
  CHECK((r.layer("conv3d") == nullptr));
  CHECK((r.loss("mse") != nullptr));
  CHECK((r.loss("kl_div") == nullptr));
  r.add_layer("zz_plugin", r.layer("relu"));
  CHECK((r.layer("zz_plugin") == r.layer("relu")));
  CHECK(r.layer_names().find(", zz_plugin") != std::string::npos);
}

TEST_CASE("factories read every key they support, finish() rejects others") {
  // All optional keys present: finish() must accept them.
  CHECK_NOTHROW(make_layer({{"type", "conv2d"}, {"in_channels", 2}, {"out_channels", 4}, {"kernel_size", 3},
                            {"stride", 1}, {"padding", 1}, {"dilation", 1}, {"groups", 2}, {"bias", false}}));
  CHECK_NOTHROW(make_layer({{"type", "linear"}, {"in_features", 3}, {"out_features", 4}, {"bias", true}}));
  CHECK_NOTHROW(make_layer({{"type", "max_pool2d"}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1},
                            {"dilation", 1}, {"ceil_mode", true}}));
  CHECK_NOTHROW(make_layer({{"type", "avg_pool2d"}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1},
                            {"ceil_mode", true}, {"count_include_pad", false}}));
  CHECK_NOTHROW(make_layer({{"type", "batch_norm2d"}, {"num_features", 3}, {"eps", 1e-3}, {"momentum", 0.2},
                            {"affine", false}, {"track_running_stats", false}}));
  CHECK_NOTHROW(make_layer({{"type", "dropout"}, {"p", 0.1}}));
  CHECK_NOTHROW(make_layer({{"type", "flatten"}, {"start_dim", 1}, {"end_dim", -1}}));
  CHECK_NOTHROW(make_layer({{"type", "softmax"}, {"dim", 1}}));
  CHECK_NOTHROW(make_layer({{"type", "concat"}, {"dim", -1}}));
  CHECK_NOTHROW(make_layer({{"type", "leaky_relu"}, {"negative_slope", 0.2}}));
  CHECK_NOTHROW(make_layer({{"type", "gelu"}, {"approximate", "tanh"}}));
  CHECK_NOTHROW(make_loss({{"type", "cross_entropy"}, {"label_smoothing", 0.1}, {"reduction", "mean"}}));
  CHECK_NOTHROW(make_loss({{"type", "mse"}, {"reduction", "mean"}}));
  CHECK_NOTHROW(make_layer({{"type", "log_softmax"}, {"dim", 1}}));
  CHECK_NOTHROW(make_loss({{"type", "nll"}, {"weight", {1, 2}}, {"ignore_index", 1}, {"reduction", "mean"}}));
  CHECK_NOTHROW(make_loss({{"type", "l1"}, {"reduction", "mean"}}));
  CHECK_NOTHROW(make_loss({{"type", "smooth_l1"}, {"beta", 0.5}, {"reduction", "mean"}}));
  CHECK_NOTHROW(make_loss({{"type", "huber"}, {"delta", 2}, {"reduction", "mean"}}));
  CHECK_NOTHROW(make_loss({{"type", "bce"}, {"weight", {1}}, {"reduction", "mean"}}));
  CHECK_NOTHROW(make_loss({{"type", "bce_with_logits"}, {"weight", {1}}, {"pos_weight", {2}}, {"reduction", "mean"}}));
  expect_error([] { make_layer({{"type", "conv2d"}, {"out_channels", 4}, {"kernal_size", 3}}); }, DP_ERR_MODEL,
               {"/layers/0/kernel_size", "missing"});
  expect_error([] { make_layer({{"type", "conv2d"}, {"out_channels", 4}, {"kernel_size", 3}, {"kernal", 3}}); },
               DP_ERR_MODEL, {"unknown key 'kernal'"});
  expect_error([] { make_layer({{"type", "relu"}, {"inplace", true}}); }, DP_ERR_MODEL, {"unknown key 'inplace'"});
}
