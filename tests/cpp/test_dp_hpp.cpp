// The C++ wrapper include/dp.hpp: ownership and moves, errors as exceptions,
// spans, and training through it equal to the same training through dp.h.
// Built with -Wall -Wextra -Wpedantic -Werror, linked with libdp.so only.
#include "dp.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace {

const char* const kModel =
    "{\"seed\": 3, \"input\": {\"shape\": [4]},"
    " \"layers\": [{\"type\": \"linear\", \"out_features\": 8}, {\"type\": \"relu\"},"
    "              {\"type\": \"linear\", \"out_features\": 3}],"
    " \"loss\": {\"type\": \"cross_entropy\"}}";
const char* const kSgd = "{\"type\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9}";

struct Batch {
  std::vector<float> x;
  std::vector<int64_t> y;
};

Batch make_batch(int rows, uint32_t seed) {
  Batch b;
  uint32_t s = seed * 2654435761u + 1;
  for (int i = 0; i < rows * 4; ++i) {
    s = s * 1664525u + 1013904223u;
    b.x.push_back(static_cast<float>(s >> 8) / 16777216.0f - 0.5f);
  }
  for (int i = 0; i < rows; ++i) b.y.push_back(i % 3);
  return b;
}

std::string temp_path(const char* name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/dp_test_cpp_" + name;
}

}  // namespace

TEST_CASE("handles are move-only and own their object") {
  static_assert(!std::is_copy_constructible<dp::Context>::value, "");
  static_assert(!std::is_copy_assignable<dp::Model>::value, "");
  static_assert(std::is_nothrow_move_constructible<dp::Tensor>::value, "");
  static_assert(std::is_nothrow_move_assignable<dp::Group>::value, "");

  dp::Context ctx;
  REQUIRE(ctx);
  dp_context* raw = ctx.get();
  dp::Context moved(std::move(ctx));
  CHECK_FALSE(ctx);  // NOLINT(bugprone-use-after-move): moved-from is empty
  CHECK(moved.get() == raw);

  dp::Model a = dp::Model::from_json(moved, kModel);
  dp::Model b = dp::Model::from_json(moved, kModel);
  dp_model* braw = b.get();
  a = std::move(b);  // destroys a's model, takes b's
  CHECK(a.get() == braw);
  CHECK_FALSE(b);

  // A call on an empty handle is dp's NULL-handle error, as an exception.
  CHECK_THROWS_AS(b.num_parameters(), dp::Error);
  try {
    b.num_parameters();
  } catch (const dp::Error& e) {
    CHECK(e.status() == DP_ERR_INVALID_ARGUMENT);
  }

  // release() hands the raw handle over; adopting it gives it back.
  dp_model* released = a.release();
  CHECK_FALSE(a);
  dp::Model adopted(released);
  CHECK(adopted.num_parameters() == 4 * 8 + 8 + 8 * 3 + 3);
  adopted.reset();
  CHECK_FALSE(adopted);

  // Handles in containers move, never copy.
  std::vector<dp::Tensor> tensors;
  for (int i = 0; i < 10; ++i) tensors.push_back(dp::Tensor(moved, DP_F32, {2, 3}));
  CHECK(tensors[9].shape() == dp::Shape{2, 3});

  // Moving a model that a group uses is fine: the group holds the dp object.
  dp::Model m = dp::Model::from_json(moved, kModel);
  dp::Group g(m, "cpu:0,cpu:1");
  dp::Model m2 = std::move(m);
  CHECK(g.num_devices() == 2);
  CHECK(m2.output_shape() == dp::Shape{3});
}

TEST_CASE("a failed call throws dp::Error with the status and dp_last_error's message") {
  dp::Context ctx;
  const char* bad = "{\"input\": {\"shape\": [4]}, \"layers\": [{\"type\": \"linear\"}]}";

  // The message the C API gives for the same call.
  dp_model* m = nullptr;
  dp_status s = dp_model_from_json(ctx.get(), bad, &m);
  REQUIRE(s != DP_OK);
  const std::string c_message = dp_last_error();
  CHECK(m == nullptr);

  try {
    dp::Model::from_json(ctx, bad);
    FAIL("no exception");
  } catch (const dp::Error& e) {
    CHECK(e.status() == s);
    CHECK(std::string(e.what()) == c_message);
    CHECK(std::string(e.status_name()) == dp_status_name(s));
  }
  // It is a std::runtime_error.
  CHECK_THROWS_AS(dp::Model::from_json(ctx, "{not json"), std::runtime_error);
  try {
    dp::Model::from_json(ctx, "{not json");
  } catch (const dp::Error& e) {
    CHECK(e.status() == DP_ERR_JSON);
    CHECK(!std::string(e.what()).empty());
  }
  CHECK_THROWS_AS(dp::Model::from_file(ctx, "/nonexistent/model.json"), dp::Error);
  dp::Group empty;
  CHECK_THROWS_AS(dp::Optimizer(empty, kSgd), dp::Error);

  // Shapes that do not fit.
  dp::Model model = dp::Model::from_json(ctx, kModel);
  dp::Group group(model, "cpu:0");
  dp::Tensor wrong = dp::Tensor::from_host(ctx, std::vector<float>(10, 1.0f), {2, 5});
  try {
    group.forward(wrong);
    FAIL("no exception");
  } catch (const dp::Error& e) {
    CHECK(e.status() == DP_ERR_SHAPE);
  }
  CHECK_THROWS_AS(dp::Tensor::from_host(ctx, std::vector<float>(7), {2, 4}), dp::Error);
  // The wrong element type for a tensor's dtype.
  CHECK_THROWS_AS(wrong.to_vector<int64_t>(), dp::Error);
}

TEST_CASE("spans and vectors carry data in and out") {
  dp::Context ctx;
  std::array<float, 6> arr{{1, 2, 3, 4, 5, 6}};
  float carr[6] = {6, 5, 4, 3, 2, 1};
  std::vector<float> vec{0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f};

  dp::Tensor t = dp::Tensor::from_host<float>(ctx, arr, {2, 3});
  CHECK(t.dtype() == DP_F32);
  CHECK(t.numel() == 6);
  CHECK(t.to_vector() == std::vector<float>(arr.begin(), arr.end()));
  t.copy_from<float>(carr);
  CHECK(t.to_vector() == std::vector<float>(carr, carr + 6));
  t.copy_from(vec);
  std::vector<float> out(6);
  t.copy_to(dp::Span<float>(out.data(), out.size()));
  CHECK(out == vec);
  CHECK_THROWS_AS(t.copy_from(std::vector<float>(5)), dp::Error);  // the wrong size

  dp::Tensor labels = dp::Tensor::from_host(ctx, std::vector<int64_t>{0, 2, 1});
  CHECK(labels.dtype() == DP_I64);
  CHECK(labels.shape() == dp::Shape{3});
  CHECK(labels.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 1});

  dp::Span<const float> s(vec);
  CHECK(s.size() == 6);
  CHECK(s.size_bytes() == 6 * sizeof(float));
  float sum = 0;
  for (float v : s) sum += v;
  CHECK(sum == doctest::Approx(18.0));

  dp::Model model = dp::Model::from_json(ctx, kModel);
  std::vector<float> p = model.parameters();
  for (float& v : p) v = 0.25f;
  model.set_parameters(p);
  CHECK(model.parameters() == p);
  std::vector<dp::ParameterInfo> info = model.parameter_info();
  REQUIRE(info.size() == 4);
  CHECK(info[0].name == "0.weight");
  CHECK(info[0].shape == dp::Shape{8, 4});
  CHECK(model.input_shape() == dp::Shape{4});
  CHECK(model.buffer_info().empty());
  dp::Model bn = dp::Model::from_json(ctx, R"({"input": {"shape": [3]}, "layers": [{"type": "batch_norm"}]})");
  const std::vector<dp::ParameterInfo> binfo = bn.buffer_info();
  REQUIRE(binfo.size() == 2);
  CHECK(binfo[1].name == "0.running_var");
  CHECK(binfo[1].shape == dp::Shape{3});
  const std::vector<float> stats{1, 2, 3, 4, 5, 6};
  bn.set_buffers(stats);
  CHECK(bn.buffers() == stats);
  CHECK_THROWS_AS(bn.set_buffers(std::vector<float>(5)), dp::Error);
  CHECK(dp::version() == dp_version());
}

TEST_CASE("training through dp.hpp equals training through dp.h") {
  const int steps = 5, rows = 10;

  // The C API.
  std::vector<float> c_losses;
  std::vector<float> c_params;
  {
    dp_context* ctx = nullptr;
    dp_model* model = nullptr;
    dp_group* group = nullptr;
    dp_optimizer* opt = nullptr;
    REQUIRE(dp_context_create(&ctx) == DP_OK);
    REQUIRE(dp_model_from_json(ctx, kModel, &model) == DP_OK);
    REQUIRE(dp_group_create(model, "cpu:0,cpu:1,cpu:2", &group) == DP_OK);
    REQUIRE(dp_optimizer_create(group, kSgd, &opt) == DP_OK);
    for (int i = 0; i < steps; ++i) {
      Batch b = make_batch(rows, static_cast<uint32_t>(i));
      int64_t xs[2] = {rows, 4}, ys[1] = {rows};
      dp_tensor *x = nullptr, *y = nullptr;
      REQUIRE(dp_tensor_from_host(ctx, DP_F32, b.x.data(), 2, xs, &x) == DP_OK);
      REQUIRE(dp_tensor_from_host(ctx, DP_I64, b.y.data(), 1, ys, &y) == DP_OK);
      float loss = 0;
      REQUIRE(dp_group_train_step(group, opt, x, y, &loss) == DP_OK);
      c_losses.push_back(loss);
      dp_tensor_destroy(x);
      dp_tensor_destroy(y);
    }
    int64_t n = 0;
    REQUIRE(dp_model_num_parameters(model, &n) == DP_OK);
    c_params.resize(static_cast<size_t>(n));
    REQUIRE(dp_model_copy_parameters(model, c_params.data(), n) == DP_OK);
    dp_optimizer_destroy(opt);
    dp_group_destroy(group);
    dp_model_destroy(model);
    dp_context_destroy(ctx);
  }

  // The same through the wrapper, reusing the input tensors in place.
  dp::Context ctx;
  dp::Model model = dp::Model::from_json(ctx, kModel);
  dp::Group group(model, "cpu:0,cpu:1,cpu:2");
  dp::Optimizer opt(group, kSgd);
  CHECK(opt.lr() == doctest::Approx(0.1));
  dp::Tensor x(ctx, DP_F32, {rows, 4});
  dp::Tensor y(ctx, DP_I64, {rows});
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    Batch b = make_batch(rows, static_cast<uint32_t>(i));
    x.copy_from(b.x);
    y.copy_from(b.y);
    losses.push_back(group.train_step(opt, x, y));
  }
  CHECK(losses == c_losses);  // bit for bit
  CHECK(model.parameters() == c_params);
  CHECK(group.last_split() == std::vector<int64_t>{4, 4, 2});

  // forward / backward / step, as PyTorch spells them.
  group.eval();
  dp::Tensor out = group(x);
  CHECK(out.shape() == dp::Shape{rows, 3});
  dp::Evaluation e = group.evaluate(x, y);
  CHECK(e.correct >= 0);
  CHECK(e.correct <= rows);
  group.train();
  group.zero_grad();
  dp::Tensor out2 = group.forward(x);
  group.backward(dp::Tensor::from_host(ctx, std::vector<float>(rows * 3, 0.1f), {rows, 3}));
  std::vector<float> grads = model.gradients();
  bool any = false;
  for (float v : grads) any = any || v != 0.0f;
  CHECK(any);
  opt.set_lr(0.01);
  opt.step();
  CHECK(model.parameters() != c_params);
  // A schedule sets the lr as each step starts, from the steps taken so far:
  // StepLR(step_size 1, gamma 0.5) halves it at every step.
  opt.set_lr_schedule(R"({"type": "step", "step_size": 1, "gamma": 0.5})");
  opt.step();
  const double first = opt.lr();
  CHECK(first < 0.01);
  opt.step();
  CHECK(opt.lr() == doctest::Approx(first / 2));
  CHECK_THROWS_AS(opt.set_lr_schedule(R"({"type": "nope"})"), dp::Error);
  opt.set_lr_schedule("");
  opt.step();
  CHECK(opt.lr() == 0.01);

  // The grad scaler: off (scale 1), PyTorch's defaults, its state, errors.
  CHECK(opt.get_scale() == 1.0);
  opt.set_grad_scaler();
  CHECK(opt.get_scale() == 65536.0);
  dp::Optimizer scaled(group, kSgd);
  scaled.set_grad_scaler(R"({"growth_interval": 2})");
  for (int i = 0; i < 4; ++i) group.train_step(scaled, x, y);
  const dp::Optimizer::GradScalerState st = scaled.grad_scaler_state();
  CHECK(st.scale == 4 * 65536.0);
  CHECK(st.growth_tracker == 0);
  CHECK(st.skipped_steps == 0);
  CHECK_THROWS_AS(scaled.set_grad_scaler(R"({"growth_interval": 0})"), dp::Error);
  scaled.set_grad_scaler("");
  CHECK(scaled.get_scale() == 1.0);

  // The optimizer's state, read from one optimizer and given to another.
  CHECK(opt.state_names() == std::vector<std::string>{"momentum_buffer"});
  std::vector<float> buf(static_cast<size_t>(model.num_parameters()));
  opt.copy_state("momentum_buffer", buf);
  dp::Optimizer twin(group, kSgd);
  twin.set_state("momentum_buffer", buf);
  twin.set_steps(opt.steps());
  twin.set_grad_scaler("{}");
  twin.set_grad_scaler_state({512.0, 7, 2});
  CHECK(twin.steps() == opt.steps());
  std::vector<float> back(buf.size());
  twin.copy_state("momentum_buffer", back);
  CHECK(back == buf);
  CHECK(twin.grad_scaler_state().scale == 512.0);
  CHECK(twin.grad_scaler_state().skipped_steps == 2);
  CHECK_THROWS_AS(twin.copy_state("exp_avg", back), dp::Error);
}

TEST_CASE("datasets, loaders and checkpoints") {
  dp::Context ctx;
  const int n = 20;
  Batch all = make_batch(n, 99);
  dp::Dataset arrays = dp::Dataset::from_arrays(ctx, all.x, {4}, all.y);
  CHECK(arrays.size() == n);
  CHECK(arrays.sample_shape() == dp::Shape{4});
  // Spans that do not hold whole samples for every target are refused before dp reads past them.
  std::vector<float> short_inputs(10);
  std::vector<int64_t> many_targets(100000);
  CHECK_THROWS_WITH_AS(dp::Dataset::from_arrays(ctx, short_inputs, {8}, many_targets),
                       "dp::Dataset::from_arrays: 10 input values for 100000 targets; each sample takes 8", dp::Error);
  std::vector<float> regression_targets(7);
  CHECK_THROWS_AS(dp::Dataset::from_arrays(ctx, all.x, {4}, regression_targets, {2}), dp::Error);  // 3.5 samples
  CHECK(dp::Dataset::from_arrays(ctx, all.x, {4}, std::vector<float>(2 * n), {2}).size() == n);

  // A C++ function as the dataset; an exception fails its batch with the message.
  dp::Dataset fn = dp::Dataset::from_function(ctx, n, {4}, [&](int64_t i, float* input, void* target) {
    if (i == 13) throw std::runtime_error("sample 13 is cursed");
    for (int k = 0; k < 4; ++k) input[k] = all.x[static_cast<size_t>(i * 4 + k)];
    *static_cast<int64_t*>(target) = all.y[static_cast<size_t>(i)];
  });
  dp::Loader bad(fn, "{\"batch_size\": 5, \"shuffle\": false, \"num_workers\": 2}");
  CHECK(bad.num_batches() == 4);
  dp::Tensor x(ctx, DP_F32, {0});
  dp::Tensor y(ctx, DP_I64, {0});
  int failed = 0;
  std::string message;
  for (;;) {
    try {
      if (bad.next(x, y) == 0) break;
    } catch (const dp::Error& e) {
      ++failed;
      message = e.what();
    }
  }
  CHECK(failed == 1);
  CHECK(message.find("sample 13 is cursed") != std::string::npos);

  dp::Model model = dp::Model::from_json(ctx, kModel);
  dp::Group group(model, "cpu:0,cpu:1");
  dp::Optimizer opt(group, "{\"type\": \"adam\", \"lr\": 0.01}");
  dp::Loader loader(arrays, "{\"batch_size\": 8, \"shuffle\": true, \"seed\": 1}");
  int64_t rows = 0, batches = 0;
  while ((rows = loader.next(x, y)) > 0) {
    CHECK(x.shape() == dp::Shape{rows, 4});
    group.train_step(opt, x, y);
    ++batches;
  }
  CHECK(batches == 3);
  CHECK(loader.position().epoch == 1);  // rows 0 ended epoch 0: the next call starts epoch 1
  CHECK(loader.position().batch == 0);

  const std::string path = temp_path("checkpoint.safetensors");
  dp::save_checkpoint(path, group, &opt, &loader, "{\"note\": \"c++\"}");
  CHECK(dp::checkpoint_metadata(path).find("c++") != std::string::npos);
  std::vector<float> saved = model.parameters();
  model.set_parameters(std::vector<float>(saved.size(), 0.0f));
  dp::load_checkpoint(path, group, &opt, &loader);
  CHECK(model.parameters() == saved);
  std::remove(path.c_str());
  CHECK_THROWS_AS(dp::load_checkpoint(path, group), dp::Error);
}

TEST_CASE("process groups: a world of one, the distributed group and a sharded loader, errors") {
  dp::Context ctx;
  dp::ProcessGroup pg("{\"rank\": 0, \"world_size\": 1}");
  CHECK(pg.rank() == 0);
  CHECK(pg.world_size() == 1);
  CHECK(pg.local_world_size() == 1);
  pg.barrier();
  dp::Model model = dp::Model::from_json(ctx, kModel);
  dp::Group group(model, "cpu:0,cpu:1", pg);
  CHECK(group.global_devices() == std::make_pair(2, 0));
  Batch all = make_batch(20, 5);
  dp::Dataset arrays = dp::Dataset::from_arrays(ctx, all.x, {4}, all.y);
  dp::Loader loader(arrays, "{\"batch_size\": 8}");
  loader.shard(group);  // in a world of one: every row
  dp::Tensor x(ctx, DP_F32, {0});
  dp::Tensor y(ctx, DP_I64, {0});
  CHECK(loader.next(x, y) == 8);
  CHECK(x.shape() == dp::Shape{8, 4});
  CHECK_THROWS_AS(loader.shard(group), dp::Error);  // after the first batch: too late
  try {
    dp::ProcessGroup bad("{\"rank\": 3, \"world_size\": 2}");
    FAIL("a rank outside the world was accepted");
  } catch (const dp::Error& e) {
    CHECK(e.status() == DP_ERR_MODEL);
    CHECK(std::string(e.what()).find("/rank") != std::string::npos);
  }
}
