// After the first step, a training step allocates nothing: every operator new
// in the process (libdp's included) is counted while steps 2..N run.
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "api_util.h"
#include "alloc_counter.h"


TEST_CASE("no allocation per training step after the first") {
  const char* json = R"({"seed": 1, "input": {"shape": [1, 12, 12]},
    "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1, "name": "c"},
               {"type": "batch_norm"}, {"type": "relu", "name": "r"},
               {"type": "add", "inputs": ["r", "c"]},
               {"type": "max_pool2d", "kernel_size": 2}, {"type": "dropout", "p": 0.2},
               {"type": "flatten"}, {"type": "linear", "out_features": 10}],
    "loss": {"type": "cross_entropy"}})";
  for (const char* devices : {"cpu:0", "cpu:0,cpu:1,cpu:2"}) {
    for (const char* opt_json : {R"({"type": "sgd", "lr": 0.01, "momentum": 0.9})", R"({"type": "adam"})"}) {
      // Without, then with the grad scaler and clipping: growing every other
      // step, then overflowing from 2^127 (inputs of 1e6), skipping steps.
      for (const char* scaler : {"", R"({"growth_interval": 2})", R"({"init_scale": 1.7014118346046923e38})"}) {
        dp_context* ctx = nullptr;
        dp_model* m = nullptr;
        dp_group* g = nullptr;
        dp_optimizer* opt = nullptr;
        DP_REQUIRE_OK(dp_context_create(&ctx));
        DP_REQUIRE_OK(dp_model_from_json(ctx, json, &m));
        DP_REQUIRE_OK(dp_group_create(m, devices, &g));
        DP_REQUIRE_OK(dp_group_set_option(g, DP_GROUP_THREADS_PER_DEVICE, 2));
        DP_REQUIRE_OK(dp_optimizer_create(g, opt_json, &opt));
        DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(opt, scaler));
        if (*scaler) DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(opt, 1.0));
        const bool overflows = std::string(scaler).find("init_scale") != std::string::npos;
        dp_tensor* x = make_f32(ctx, std::vector<float>(16 * 144, overflows ? 1e6f : 0.5f), {16, 1, 12, 12});
        std::vector<int64_t> labels(16);
        for (int i = 0; i < 16; ++i) labels[i] = i % 10;
        dp_tensor* y = make_i64(ctx, labels, {16});
        float loss = 0;
        DP_REQUIRE_OK(dp_group_train_step(g, opt, x, y, &loss));
        long before = dp::test::allocations();
        for (int s = 0; s < 5; ++s) {
          dp_status st = dp_group_train_step(g, opt, x, y, &loss);
          REQUIRE(st == DP_OK);
        }
        long during = dp::test::allocations() - before;
        CAPTURE(devices);
        CAPTURE(scaler);
        CHECK(during == 0);
        int64_t skipped = 0;
        DP_REQUIRE_OK(dp_optimizer_grad_scaler_state(opt, nullptr, nullptr, &skipped));
        CHECK((skipped > 0) == overflows);
        dp_tensor_destroy(x);
        dp_tensor_destroy(y);
        dp_optimizer_destroy(opt);
        dp_group_destroy(g);
        dp_model_destroy(m);
        dp_context_destroy(ctx);
      }
    }
  }
}
