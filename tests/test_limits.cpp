// Sizes checked before memory is taken: a model, a group, an optimizer or a
// batch that would not fit is refused with a message naming what and how
// many bytes, nothing is allocated (this runs under AddressSanitizer too,
// whose allocator would abort on a petabyte request), and everything stays
// usable. Element counts that overflow are refused as shapes.
#include <string>
#include <vector>

#include "api_util.h"

namespace {

void require_error(dp_status s, dp_status want, const std::vector<std::string>& parts) {
  std::string msg = dp_last_error();
  CHECK_MESSAGE(s == want, dp_status_name(s) << ": " << msg);
  for (const auto& p : parts) CHECK_MESSAGE(msg.find(p) != std::string::npos, "'" << p << "' not in: " << msg);
}

dp_status build(dp_context* ctx, const std::string& json, dp_model** m) { return dp_model_from_json(ctx, json.c_str(), m); }

const char* kMlp = R"({"input": {"shape": [100]}, "layers": [{"type": "linear", "out_features": 1000, "name": "big"},
  {"type": "relu"}, {"type": "linear", "out_features": 10}], "loss": {"type": "cross_entropy"}})";
// 100*1000 + 1000 + 1000*10 + 10 = 111010 parameters: 888 080 bytes with gradients.

}  // namespace

TEST_CASE("a model too large for the machine is refused before allocation, naming the layer and the bytes") {
  dp_context* ctx = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  dp_model* m = nullptr;
  require_error(build(ctx, R"({"input": {"shape": [784]}, "layers": [{"type": "linear", "out_features": 99999999999999}]})", &m),
                DP_ERR_OUT_OF_MEMORY, {"/layers/0 (linear '0')", "PB", "available memory", "nothing was allocated"});
  CHECK(m == nullptr);
  // Element counts that overflow int64: a shape error, not a wrapped size.
  require_error(build(ctx, R"({"input": {"shape": [4194304]}, "layers": [{"type": "linear", "out_features": 4398046511104}]})", &m),
                DP_ERR_SHAPE, {"/layers/0", "too many elements"});
  require_error(build(ctx, R"({"input": {"shape": [1099511627776, 1099511627776]}, "layers": [{"type": "relu"}]})", &m),
                DP_ERR_SHAPE, {"too many elements"});
  // The context still builds models.
  DP_REQUIRE_OK(build(ctx, kMlp, &m));
  dp_model_destroy(m);
  // A tensor larger than the machine: refused, not attempted.
  dp_tensor* t = nullptr;
  const int64_t huge[2] = {int64_t{1} << 30, int64_t{1} << 28};
  require_error(dp_tensor_create(ctx, DP_F32, 2, huge, &t), DP_ERR_OUT_OF_MEMORY, {"more than the machine's memory"});
  const int64_t over[3] = {int64_t{1} << 40, int64_t{1} << 40, 4};
  require_error(dp_tensor_create(ctx, DP_F32, 3, over, &t), DP_ERR_SHAPE, {"too many elements"});
  CHECK(t == nullptr);
  // A borrowed tensor's shape is counted the same way: [2^62, 4] wrapped to 0
  // elements and was accepted over a 16-byte buffer.
  float four[4] = {};
  const int64_t wraps[2] = {int64_t{1} << 62, 4};
  require_error(dp_tensor_from_host(ctx, DP_F32, four, 2, wraps, &t), DP_ERR_SHAPE, {"dp_tensor_from_host", "too many elements"});
  require_error(dp_tensor_from_host_borrowed(ctx, DP_F32, four, 2, wraps, nullptr, nullptr, &t), DP_ERR_SHAPE,
                {"dp_tensor_from_host_borrowed: shape [4611686018427387904, 4] has too many elements"});
  CHECK(t == nullptr);
  dp_context_destroy(ctx);
}

TEST_CASE("DP_CONTEXT_MEMORY_LIMIT: model, group, optimizer state and a batch's activations each checked") {
  dp_context* ctx = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  require_error(dp_context_set_option(ctx, DP_CONTEXT_MEMORY_LIMIT, -1), DP_ERR_INVALID_ARGUMENT, {"DP_CONTEXT_MEMORY_LIMIT"});
  require_error(dp_context_set_option(ctx, static_cast<dp_context_option>(99), 1), DP_ERR_INVALID_ARGUMENT, {"unknown option 99"});
  dp_model* m = nullptr;
  // The model: 888 080 bytes.
  DP_REQUIRE_OK(dp_context_set_option(ctx, DP_CONTEXT_MEMORY_LIMIT, 800000));
  require_error(build(ctx, kMlp, &m), DP_ERR_OUT_OF_MEMORY,
                {"111010 parameters", "/layers/0 (linear 'big')", "800.0 kB", "DP_CONTEXT_MEMORY_LIMIT"});
  // With 2 MB: the model fits; 2 replicas' gradients (888 kB) do too, 3 do not.
  DP_REQUIRE_OK(dp_context_set_option(ctx, DP_CONTEXT_MEMORY_LIMIT, 2000000));
  DP_REQUIRE_OK(build(ctx, kMlp, &m));
  dp_group* g = nullptr;
  require_error(dp_group_create(m, "cpu:0,cpu:1,cpu:2", &g), DP_ERR_OUT_OF_MEMORY, {"a group of 3 CPU devices", "2.0 MB"});
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &g));
  // Adam's two state floats per parameter (888 kB) do not fit beside them; SGD without momentum has none.
  dp_optimizer* opt = nullptr;
  require_error(dp_optimizer_create(g, R"({"type": "adam"})", &opt), DP_ERR_OUT_OF_MEMORY, {"the adam optimizer's state", "2 x 111010"});
  DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "sgd", "lr": 0.1})", &opt));
  // Activations: 1000 + 1000 + 10 floats a row, and their gradients: 16 080 bytes a row; about 200 kB are left.
  const std::vector<float> before = params_of(m);
  auto batch = [&](int64_t rows, dp_tensor** x, dp_tensor** y) {
    *x = make_f32(ctx, std::vector<float>(static_cast<size_t>(rows * 100), 0.1f), {rows, 100});
    *y = make_i64(ctx, std::vector<int64_t>(static_cast<size_t>(rows), 3), {rows});
  };
  dp_tensor *xb = nullptr, *yb = nullptr, *xs = nullptr, *ys = nullptr;
  batch(64, &xb, &yb);
  batch(8, &xs, &ys);
  float loss = -1;
  require_error(dp_group_train_step(g, opt, xb, yb, &loss), DP_ERR_OUT_OF_MEMORY,
                {"a batch of 64 rows", "16.1 kB a row", "the largest output is /layers/0 (linear 'big')"});
  CHECK(loss == -1.f);
  CHECK(params_of(m) == before);
  DP_REQUIRE_OK(dp_group_train_step(g, opt, xs, ys, &loss));
  CHECK(params_of(m) != before);
  // No limit: the machine's available memory; the large batch runs.
  DP_REQUIRE_OK(dp_context_set_option(ctx, DP_CONTEXT_MEMORY_LIMIT, 0));
  dp_model* m2 = nullptr;
  DP_REQUIRE_OK(build(ctx, kMlp, &m2));
  dp_group* g2 = nullptr;
  dp_optimizer* o2 = nullptr;
  DP_REQUIRE_OK(dp_group_create(m2, "cpu:0,cpu:1,cpu:2", &g2));
  DP_REQUIRE_OK(dp_optimizer_create(g2, R"({"type": "adam"})", &o2));
  DP_REQUIRE_OK(dp_group_train_step(g2, o2, xb, yb, &loss));
  for (dp_tensor* t : {xb, yb, xs, ys}) dp_tensor_destroy(t);
  dp_optimizer_destroy(o2);
  dp_group_destroy(g2);
  dp_model_destroy(m2);
  dp_optimizer_destroy(opt);
  dp_group_destroy(g);
  dp_model_destroy(m);
  dp_context_destroy(ctx);
}

// A layer's scratch counts too (conv2d keeps one sample's unfolded input per
// worker thread, whatever the batch): a kernel and padding of 200 on an 8x8
// plane unfolds to 200*200 x 209*209 floats, 7 GB, which took 13.8 GB under a
// 16 MB limit before the group counted it.
TEST_CASE("DP_CONTEXT_MEMORY_LIMIT counts each worker thread's layer scratch (conv2d's unfolded input)") {
  dp_context* ctx = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  DP_REQUIRE_OK(dp_context_set_option(ctx, DP_CONTEXT_MEMORY_LIMIT, 16000000));
  dp_model* huge = nullptr;
  DP_REQUIRE_OK(build(ctx, R"({"input": {"shape": [1, 8, 8]}, "layers": [{"type": "conv2d", "out_channels": 1,
    "kernel_size": 200, "padding": 200, "name": "wide"}, {"type": "flatten"}], "loss": {"type": "mse"}})", &huge));
  dp_group* g = nullptr;
  require_error(dp_group_create(huge, "cpu:0", &g), DP_ERR_OUT_OF_MEMORY,
                {"a group of 1 CPU devices", "layer scratch", "1747280001 floats a thread", "/layers/0's (conv2d 'wide')",
                 "16.0 MB"});
  CHECK(g == nullptr);
  dp_model_destroy(huge);

  // 4 channels of 64x64, 3x3 with padding 1: 36 x 4096 unfolded floats and
  // 148 of weight gradients, 590 kB a thread. The model (394 kB) and two
  // devices of one thread (each 787 kB with its gradients) fit in 3 MB, and a
  // batch of 2 rows (524 kB) beside them; two threads each (1.2 MB more) do
  // not, and the group keeps its one.
  DP_REQUIRE_OK(dp_context_set_option(ctx, DP_CONTEXT_MEMORY_LIMIT, 3000000));
  dp_model* m = nullptr;
  DP_REQUIRE_OK(build(ctx, R"({"input": {"shape": [4, 64, 64]}, "layers": [{"type": "conv2d", "out_channels": 4,
    "kernel_size": 3, "padding": 1}, {"type": "flatten"}, {"type": "linear", "out_features": 3}],
    "loss": {"type": "cross_entropy"}})", &m));
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &g));
  require_error(dp_group_set_option(g, DP_GROUP_THREADS_PER_DEVICE, 2), DP_ERR_OUT_OF_MEMORY,
                {"2 threads per device", "590.4 kB a device", "/layers/0's (conv2d '0')", "3.0 MB"});
  dp_optimizer* opt = nullptr;
  DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "sgd", "lr": 0.1})", &opt));
  dp_tensor* x = make_f32(ctx, std::vector<float>(2 * 4 * 64 * 64, 0.5f), {2, 4, 64, 64});
  dp_tensor* y = make_i64(ctx, {0, 2}, {2});
  float loss = -1;
  const dp_status st = dp_group_train_step(g, opt, x, y, &loss);
  REQUIRE_MESSAGE(st == DP_OK, std::string(dp_last_error()));
  CHECK(loss > 0);
  // Without a limit the threads are given.
  DP_REQUIRE_OK(dp_context_set_option(ctx, DP_CONTEXT_MEMORY_LIMIT, 0));
  dp_model* m2 = nullptr;
  DP_REQUIRE_OK(build(ctx, R"({"input": {"shape": [4, 64, 64]}, "layers": [{"type": "conv2d", "out_channels": 4,
    "kernel_size": 3, "padding": 1}, {"type": "flatten"}, {"type": "linear", "out_features": 3}],
    "loss": {"type": "cross_entropy"}})", &m2));
  dp_group* g2 = nullptr;
  DP_REQUIRE_OK(dp_group_create(m2, "cpu:0,cpu:1", &g2));
  DP_REQUIRE_OK(dp_group_set_option(g2, DP_GROUP_THREADS_PER_DEVICE, 2));
  DP_REQUIRE_OK(dp_group_set_option(g2, DP_GROUP_THREADS_PER_DEVICE, 1));
  dp_group_destroy(g2);
  dp_model_destroy(m2);
  dp_tensor_destroy(x);
  dp_tensor_destroy(y);
  dp_optimizer_destroy(opt);
  dp_group_destroy(g);
  dp_model_destroy(m);
  dp_context_destroy(ctx);
}

// Every check counted the model and one group only: a second group and a
// second optimizer on the same model each fitted on their own, together far
// past the limit. The model now keeps the bytes of all its groups and
// optimizers, each taking its share back when destroyed.
TEST_CASE("DP_CONTEXT_MEMORY_LIMIT counts every group and optimizer of the model, until each is destroyed") {
  dp_context* ctx = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  // kMlp: 444 040 bytes a float per parameter; the model (with gradients) 888 080.
  DP_REQUIRE_OK(dp_context_set_option(ctx, DP_CONTEXT_MEMORY_LIMIT, 3000000));
  dp_model* m = nullptr;
  DP_REQUIRE_OK(build(ctx, kMlp, &m));
  dp_group *a = nullptr, *b = nullptr;
  dp_optimizer *oa = nullptr, *ob = nullptr;
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &a));        // + 888 080: 1 776 160
  DP_REQUIRE_OK(dp_optimizer_create(a, R"({"type": "adam"})", &oa));  // + 888 080: 2 664 240
  // A second group of one device (444 040) fits beside the model alone, not beside the first group and its optimizer.
  require_error(dp_group_create(m, "cpu:0", &b), DP_ERR_OUT_OF_MEMORY, {"a group of 1 CPU devices", "3.0 MB"});
  CHECK(b == nullptr);
  // The first optimizer destroyed, its state no longer counts: the group fits, a second Adam does not.
  dp_optimizer_destroy(oa);
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0", &b));  // 2 220 200
  require_error(dp_optimizer_create(b, R"({"type": "adam"})", &ob), DP_ERR_OUT_OF_MEMORY,
                {"the adam optimizer's state", "3.0 MB"});
  CHECK(ob == nullptr);
  // The first group destroyed: Adam fits beside the second.
  dp_group_destroy(a);
  DP_REQUIRE_OK(dp_optimizer_create(b, R"({"type": "adam"})", &ob));  // 2 220 200
  dp_optimizer_destroy(ob);
  dp_group_destroy(b);
  dp_model_destroy(m);
  dp_context_destroy(ctx);
}
