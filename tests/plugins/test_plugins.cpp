// Layer plugins: the ABI's fixed layout, loading (and every way it fails, each
// leaving the context as it was), errors from a plugin's callbacks during
// training, the "plugins" key of a model's JSON and DP_PLUGIN_PATH, the
// generic gradient and steady-state checks on plugin layers, N-device vs
// 1-device equivalence, and checkpoints holding plugin parameters.
#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "api_util.h"
#include "common.h"
#include "dp_plugin.h"
#include "plugin/plugin.h"

using namespace dp;
using namespace dp::test;

// Version 1's layout is frozen (LP64): later versions only append.
static_assert(offsetof(dp_plugin_layer_type, struct_size) == 0, "");
static_assert(offsetof(dp_plugin_layer_type, name) == 8, "");
static_assert(offsetof(dp_plugin_layer_type, version) == 16, "");
static_assert(offsetof(dp_plugin_layer_type, min_inputs) == 20, "");
static_assert(offsetof(dp_plugin_layer_type, max_inputs) == 24, "");
static_assert(offsetof(dp_plugin_layer_type, user) == 32, "");
static_assert(offsetof(dp_plugin_layer_type, create) == 40, "");
static_assert(offsetof(dp_plugin_layer_type, destroy) == 48, "");
static_assert(offsetof(dp_plugin_layer_type, infer) == 56, "");
static_assert(offsetof(dp_plugin_layer_type, forward) == 64, "");
static_assert(offsetof(dp_plugin_layer_type, backward) == 72, "");
static_assert(offsetof(dp_plugin_layer_type, merge_stats) == 80, "");
static_assert(offsetof(dp_plugin_layer_type, device_impls) == 88, "");
static_assert(sizeof(dp_plugin_layer_type) == 96, "");
static_assert(offsetof(dp_host_api, struct_size) == 0, "");
static_assert(offsetof(dp_host_api, version) == 8, "");
static_assert(offsetof(dp_host_api, register_layer) == 16, "");
static_assert(offsetof(dp_host_api, args_json) == 24, "");
static_assert(offsetof(dp_host_api, args_string) == 72, "");
static_assert(offsetof(dp_host_api, declare_param) == 80, "");
static_assert(offsetof(dp_host_api, declare_stats) == 96, "");
static_assert(offsetof(dp_host_api, scratch) == 104, "");
static_assert(offsetof(dp_host_api, parallel_for) == 112, "");
static_assert(offsetof(dp_host_api, uniform01) == 120, "");
static_assert(offsetof(dp_host_api, args_int_range) == 128, "");  // appended: version 1's first 128 bytes unchanged
static_assert(sizeof(dp_host_api) == 136, "");
static_assert(offsetof(dp_host_api_base, get_api) == 8, "");
static_assert(offsetof(dp_host_api_base, registrar) == 16, "");
static_assert(offsetof(dp_host_api_base, host_version) == 24, "");
static_assert(offsetof(dp_plugin_tensor, data) == 0 && offsetof(dp_plugin_tensor, dtype) == 8 &&
                  offsetof(dp_plugin_tensor, ndim) == 12 && offsetof(dp_plugin_tensor, shape) == 16 &&
                  offsetof(dp_plugin_tensor, strides) == 80 && offsetof(dp_plugin_tensor, device_type) == 144 &&
                  offsetof(dp_plugin_tensor, device_index) == 148,
              "");
static_assert(offsetof(dp_plugin_run, training) == 8 && offsetof(dp_plugin_run, seed) == 16 &&
                  offsetof(dp_plugin_run, step) == 24 && offsetof(dp_plugin_run, sample_offset) == 32 &&
                  offsetof(dp_plugin_run, batch_total) == 40 && offsetof(dp_plugin_run, host) == 48,
              "");
// Version 2: appended to dp_plugin_run; dp_plugin_device_impls is new.
static_assert(offsetof(dp_plugin_run, device_type) == 56 && offsetof(dp_plugin_run, device_index) == 60 &&
                  offsetof(dp_plugin_run, stream) == 64 && sizeof(dp_plugin_run) == 72,
              "");
static_assert(offsetof(dp_plugin_device_impls, struct_size) == 0 && offsetof(dp_plugin_device_impls, cuda_forward) == 8 &&
                  offsetof(dp_plugin_device_impls, cuda_backward) == 16 && sizeof(dp_plugin_device_impls) == 24,
              "");
static_assert(DP_PLUGIN_DEVICE_CPU == 0 && DP_PLUGIN_DEVICE_CUDA == 1, "");
static_assert(offsetof(dp_plugin_io, num_inputs) == 8 && offsetof(dp_plugin_io, inputs) == 16 &&
                  offsetof(dp_plugin_io, output) == 24 && offsetof(dp_plugin_io, grad_inputs) == 328 &&
                  offsetof(dp_plugin_io, stats) == 360,
              "");

namespace {

struct Ctx {
  dp_context* ctx = nullptr;
  Ctx() { DP_REQUIRE_OK(dp_context_create(&ctx)); }
  ~Ctx() { dp_context_destroy(ctx); }
  int count() {
    int n = -1;
    DP_REQUIRE_OK(dp_context_num_plugins(ctx, &n));
    return n;
  }
  // Builds and destroys a model; returns its status (message in dp_last_error).
  dp_status build(const std::string& json) {
    dp_model* m = nullptr;
    dp_status s = dp_model_from_json(ctx, json.c_str(), &m);
    dp_model_destroy(m);
    return s;
  }
};

std::string model_with(const std::string& layer) {
  return R"({"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 3}, )" + layer +
         R"(], "loss": {"type": "mse"}})";
}

void require_error(dp_status s, dp_status want, std::vector<std::string> parts) {
  std::string msg = dp_last_error();
  CHECK_MESSAGE(s == want, dp_status_name(s) << ": " << msg);
  for (const auto& p : parts) CHECK_MESSAGE(msg.find(p) != std::string::npos, "'" << p << "' not in: " << msg);
}

}  // namespace

TEST_CASE("plugins: load, list, load again as a no-op") {
  Ctx c;
  CHECK(c.count() == 0);
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, PLUGIN_SWISH));
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, PLUGIN_SWISH));
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, (std::string(PLUGINS_BUILD_DIR) + "/../plugins/swish.so").c_str()));
  REQUIRE(c.count() == 1);
  const char *path = nullptr, *types = nullptr;
  DP_REQUIRE_OK(dp_context_plugin_info(c.ctx, 0, &path, &types));
  CHECK(std::string(path).find("swish.so") != std::string::npos);
  CHECK(std::string(types) == "swish@1");
  CHECK(dp_context_plugin_info(c.ctx, 1, &path, &types) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_context_load_plugin(nullptr, PLUGIN_SWISH) == DP_ERR_INVALID_ARGUMENT);
  DP_REQUIRE_OK(c.build(model_with(R"({"type": "swish"})")));
}

TEST_CASE("plugins: each load failure is DP_ERR_PLUGIN, registers nothing and leaves the context usable") {
  Ctx c;
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, PLUGIN_SWISH));
  require_error(dp_context_load_plugin(c.ctx, "/nonexistent/nothing.so"), DP_ERR_PLUGIN, {"not found", "/nonexistent/nothing.so"});
  require_error(dp_context_load_plugin(c.ctx, "no_such_plugin"), DP_ERR_PLUGIN, {"not found", "DP_PLUGIN_PATH"});
  require_error(dp_context_load_plugin(c.ctx, FIXTURE_NO_INIT), DP_ERR_PLUGIN, {"does not export dp_plugin_init"});
  require_error(dp_context_load_plugin(c.ctx, FIXTURE_WRONG_VERSION), DP_ERR_PLUGIN, {"host API version 99", "provides versions 1 and 2"});
  require_error(dp_context_load_plugin(c.ctx, FIXTURE_INIT_FAILS), DP_ERR_PLUGIN,
                {"dp_plugin_init failed", "refusing to load on purpose", "nothing from this plugin was registered"});
  require_error(dp_context_load_plugin(c.ctx, FIXTURE_DUP_BUILTIN), DP_ERR_PLUGIN, {"'relu'", "built-in"});
  require_error(dp_context_load_plugin(c.ctx, FIXTURE_DUP_SWISH), DP_ERR_PLUGIN, {"'swish'", "swish.so"});
  // A non-library file.
  require_error(dp_context_load_plugin(c.ctx, FIXTURE_SOURCE), DP_ERR_PLUGIN, {"cannot load plugin"});
  CHECK(c.count() == 1);
  // Types registered before a failing init's end did not stay.
  for (const char* t : {"fixture_half", "fixture_dup_first", "fixture_dup_second"})
    require_error(c.build(model_with(std::string(R"({"type": ")") + t + "\"}")), DP_ERR_MODEL, {"unknown layer type", t});
  DP_REQUIRE_OK(c.build(model_with(R"({"type": "swish"}, {"type": "relu"})")));
  // A failed load can be retried once the cause is gone: the same fixture
  // fails the same way (nothing half-loaded is remembered as loaded).
  require_error(dp_context_load_plugin(c.ctx, FIXTURE_INIT_FAILS), DP_ERR_PLUGIN, {"refusing"});
}

TEST_CASE("plugins: hyperparameter errors name the JSON path; shape errors name the layer") {
  Ctx c;
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, PLUGIN_RMS_NORM));
  require_error(c.build(model_with(R"({"type": "rms_norm", "eps": -1})")), DP_ERR_MODEL, {"/layers/1/eps", "expected a number in [0.0, 1.0]"});
  require_error(c.build(model_with(R"({"type": "rms_norm", "epss": 0.1})")), DP_ERR_MODEL, {"/layers/1/epss", "unknown key", "eps"});
  require_error(c.build(model_with(R"({"type": "rms_norm", "normalized_shape": 5})")), DP_ERR_SHAPE,
                {"/layers/1 (rms_norm '1')", "normalized_shape is 5", "last dimension is 3"});
  DP_REQUIRE_OK(c.build(model_with(R"({"type": "rms_norm", "normalized_shape": 3, "eps": 1e-6, "elementwise_affine": false})")));
}

TEST_CASE("plugins: constant init, args_int_range, checked declarations, identifier names, infer names its plugin") {
  Ctx c;
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, FIXTURE_PRELU));
  // nn.PReLU's weight starts at 0.25 (DP_PLUGIN_INIT_CONSTANT), or at "init".
  for (const char* init : {"", R"(, "init": -1.5)"}) {
    dp_model* m = nullptr;
    const std::string json = model_with(std::string(R"({"type": "fixture_prelu", "num_parameters": 3)") + init + "}");
    DP_REQUIRE_OK(dp_model_from_json(c.ctx, json.c_str(), &m));
    const std::vector<float> p = params_of(m);  // linear 4->3 (15), then the 3 weights
    REQUIRE(p.size() == 18);
    for (int i = 15; i < 18; ++i) CHECK(p[static_cast<size_t>(i)] == (*init ? -1.5f : 0.25f));
    dp_model_destroy(m);
  }
  // args_int_range: both bounds, in the message.
  for (const char* n : {"0", "4097", "2.5"})
    require_error(c.build(model_with(std::string(R"({"type": "fixture_prelu", "num_parameters": )") + n + "}")), DP_ERR_MODEL,
                  {"/layers/1/num_parameters: expected an integer in [1, 4096], got " + std::string(n)});
  // Declarations the host refuses: DP_ERR_PLUGIN, naming the layer and the plugin.
  require_error(c.build(model_with(R"({"type": "fixture_prelu", "init_kind": 2, "init_bound": -0.5})")), DP_ERR_PLUGIN,
                {"/layers/1 (fixture_prelu '1')", "fixture_prelu.so", "bound -0.5", ">= 0"});
  require_error(c.build(model_with(R"({"type": "fixture_prelu", "init_kind": 7})")), DP_ERR_PLUGIN,
                {"/layers/1 (fixture_prelu '1')", "fixture_prelu.so", "unknown init 7"});
  // infer refusing its inputs: DP_ERR_SHAPE, naming the plugin as forward's errors do.
  require_error(c.build(model_with(R"({"type": "fixture_prelu", "num_parameters": 5})")), DP_ERR_SHAPE,
                {"/layers/1 (fixture_prelu '1')", "plugin ", "fixture_prelu.so: infer failed", "num_parameters 5"});
  // Type names are identifiers: the plugin with "has space" does not load at all.
  require_error(dp_context_load_plugin(c.ctx, FIXTURE_BAD_NAME), DP_ERR_PLUGIN,
                {"\"has space\" is not an identifier", "nothing from this plugin was registered"});
  require_error(c.build(model_with(R"({"type": "fixture_fine"})")), DP_ERR_MODEL, {"unknown layer type"});
  CHECK(c.count() == 1);
}

TEST_CASE("plugins: host API version 2: device code registers, version-1 plugins unchanged, bad device tables refused") {
  Ctx c;
  // A version-1 plugin (asks get_api(1), checks that the table says 1) and a
  // version-2 one with CUDA entries load side by side.
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, FIXTURE_PLUGIN_RELU));
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, FIXTURE_V2_RELU));
  const char *path = nullptr, *types = nullptr;
  DP_REQUIRE_OK(dp_context_plugin_info(c.ctx, 0, &path, &types));
  CHECK(std::string(types) == "plugin_relu@7");
  DP_REQUIRE_OK(dp_context_plugin_info(c.ctx, 1, &path, &types));
  CHECK(std::string(types) == "fixture_v2_relu@7");
  {  // Only the version-2 type says its own code runs on CUDA replicas.
    Registry types2;
    Plugins plugins;
    plugins.load(types2, FIXTURE_PLUGIN_RELU, "");
    plugins.load(types2, FIXTURE_V2_RELU, "");
    CHECK_FALSE(make_layer(types2, {{"type", "plugin_relu"}})->runs_on_cuda());
    CHECK(make_layer(types2, {{"type", "fixture_v2_relu"}})->runs_on_cuda());
    CHECK_FALSE(make_layer({{"type", "relu"}})->runs_on_cuda());  // built-ins have their ops in backends/cuda/ops
  }
  // Refused, registering nothing: device code from a plugin that asked for
  // version 1; CUDA forward without backward; a device table too small.
  require_error(dp_context_load_plugin(c.ctx, FIXTURE_V1_DEVICE_IMPLS), DP_ERR_PLUGIN,
                {"fixture_device_bad", "device_impls must be NULL for a plugin that asked for host API version 1",
                 "nothing from this plugin was registered"});
  require_error(dp_context_load_plugin(c.ctx, FIXTURE_V2_HALF_IMPLS), DP_ERR_PLUGIN,
                {"fixture_device_bad", "cuda_forward without cuda_backward"});
  require_error(dp_context_load_plugin(c.ctx, FIXTURE_V2_SMALL_IMPLS), DP_ERR_PLUGIN,
                {"fixture_device_bad", "device_impls' struct_size 8 is smaller than version 2's"});
  CHECK(c.count() == 2);
  require_error(c.build(model_with(R"({"type": "fixture_device_bad"})")), DP_ERR_MODEL, {"unknown layer type"});

  // On CPU devices a type with CUDA code runs its CPU code (the fixture's CUDA
  // entries fail if called; its CPU forward checks version 2's run fields and
  // views): bitwise as the version-1 relu, on 1 and 3 devices.
  auto train = [&](const char* type, const char* devices) {
    dp_model* m = nullptr;
    DP_REQUIRE_OK(dp_model_from_json(c.ctx, model_with(std::string(R"({"type": ")") + type + "\"}, " +
                                                       R"({"type": "linear", "out_features": 2})").c_str(), &m));
    dp_group* g = nullptr;
    DP_REQUIRE_OK(dp_group_create(m, devices, &g));
    dp_optimizer* opt = nullptr;
    DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "sgd", "lr": 0.1, "momentum": 0.9})", &opt));
    std::vector<float> x(7 * 4), y(7 * 2);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * float(i));
    for (size_t i = 0; i < y.size(); ++i) y[i] = std::cos(0.3f * float(i));
    dp_tensor *tx = make_f32(c.ctx, x, {7, 4}), *ty = make_f32(c.ctx, y, {7, 2});
    for (int k = 0; k < 4; ++k) {
      float loss = 0;
      dp_status st = dp_group_train_step(g, opt, tx, ty, &loss);
      INFO(type << " on " << devices << ": " << dp_status_name(st) << ": " << dp_last_error());
      REQUIRE(st == DP_OK);
    }
    std::vector<float> p = params_of(m);
    dp_tensor_destroy(tx), dp_tensor_destroy(ty);
    dp_optimizer_destroy(opt);
    dp_group_destroy(g);
    dp_model_destroy(m);
    return p;
  };
  for (const char* devices : {"cpu:0", "cpu:0,cpu:1,cpu:2"}) {
    CAPTURE(devices);
    CHECK(train("fixture_v2_relu", devices) == train("plugin_relu", devices));
  }
}

TEST_CASE("plugins: a library with CUDA code stays loaded after its last user; one without is unloaded") {
  // The CUDA runtime keeps a library's kernels registered: unloaded and loaded
  // again (a CPU run, then a GPU run), swish's launches failed on an H200.
  auto loaded = [](const char* path) {
    void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h) dlclose(h);
    return h != nullptr;
  };
  for (const char* path : {FIXTURE_V2_RELU, FIXTURE_PLUGIN_RELU}) {
    CAPTURE(path);
    const bool has_device_code = std::string(path) == FIXTURE_V2_RELU;
    {
      Registry types;
      Plugins plugins;
      plugins.load(types, path, "");
      auto layer = make_layer(types, {{"type", has_device_code ? "fixture_v2_relu" : "plugin_relu"}});
      CHECK(layer->runs_on_cuda() == has_device_code);
      CHECK(loaded(path));
    }
    CHECK(loaded(path) == has_device_code);
  }
}

TEST_CASE("plugins: a callback's error during training reaches dp_group_train_step; the group stays usable") {
  Ctx c;
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, FIXTURE_FAILS_FORWARD));
  dp_model* m = nullptr;
  DP_REQUIRE_OK(dp_model_from_json(c.ctx, model_with(R"({"type": "fails_forward", "max_input": 100, "name": "guard"})").c_str(), &m));
  dp_group* g = nullptr;
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1,cpu:2", &g));
  dp_optimizer* opt = nullptr;
  DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "sgd", "lr": 0.1})", &opt));
  std::vector<float> x(6 * 4, 0.5f), big(6 * 4, 0.5f), y(6 * 3, 0.f);
  big[4 * 4 + 1] = 1e6f;  // row 4: the third device
  dp_tensor *tx = make_f32(c.ctx, x, {6, 4}), *tb = make_f32(c.ctx, big, {6, 4}), *ty = make_f32(c.ctx, y, {6, 3});
  float loss = 0;
  DP_REQUIRE_OK(dp_group_train_step(g, opt, tx, ty, &loss));
  auto before = params_of(m);
  require_error(dp_group_train_step(g, opt, tb, ty, &loss), DP_ERR_PLUGIN,
                {"/layers/1 (fails_forward 'guard'", "forward failed", "exceeds max_input 100"});
  CHECK(params_of(m) == before);
  DP_REQUIRE_OK(dp_group_train_step(g, opt, tx, ty, &loss));
  CHECK(params_of(m) != before);
  dp_tensor_destroy(tx), dp_tensor_destroy(tb), dp_tensor_destroy(ty);
  dp_optimizer_destroy(opt);
  dp_group_destroy(g);
  dp_model_destroy(m);
}

// A callback written in C++ may throw, though dp_plugin.h says it must not:
// an exception from parallel_for's function used to vanish (the layer's
// output never written, the step DP_OK), one from merge_stats left the step
// half-done, one from destroy ended the process. Each is DP_ERR_PLUGIN now,
// naming layer, plugin and callback; the error says what the call did.
TEST_CASE("plugins: exceptions from a C++ plugin's callbacks are DP_ERR_PLUGIN naming where; nothing half-done") {
  Ctx c;
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, FIXTURE_THROWS));
  auto layer = [](const std::string& in, int at_step = 1) {
    return model_with(R"({"type": "throws", "name": "t", "throw_in": ")" + in + R"(", "at_step": )" +
                      std::to_string(at_step) + "}");
  };
  require_error(c.build(layer("create")), DP_ERR_PLUGIN,
                {"/layers/1 (throws, plugin ", "fixture_throws.so): create threw: thrown in create on purpose"});
  require_error(c.build(layer("infer")), DP_ERR_PLUGIN,
                {"/layers/1 (throws 't')", "fixture_throws.so: infer threw: thrown in infer on purpose"});
  require_error(c.build(R"({"input": {"shape": [4]}, "layers": [{"type": "throws", "stats": -5}]})"), DP_ERR_PLUGIN,
                {"/layers/0", "declare_stats: count must be >= 0, got -5"});
  // destroy: dropped (no caller to tell), the process goes on.
  DP_REQUIRE_OK(c.build(layer("destroy")));

  // During training: step 0 succeeds, step 1 fails, step 2 succeeds again.
  struct Case {
    const char* in;
    std::vector<std::string> said;
    bool stepped;  // whether the failed call's update was applied
  };
  const std::vector<Case> cases = {
      {"forward", {"/layers/1 (throws 't', plugin ", "): forward threw: thrown in forward on purpose"}, false},
      {"backward", {"): backward threw: thrown in backward on purpose"}, false},
      {"parallel_for", {"): forward: a parallel_for function threw: thrown in parallel_for on purpose"}, false},
      {"merge_stats",
       {"): merge_stats threw: thrown in merge_stats on purpose", "the step was taken", "merge did not finish"},
       true},
  };
  for (const Case& k : cases) {
    CAPTURE(k.in);
    dp_model* m = nullptr;
    DP_REQUIRE_OK(dp_model_from_json(c.ctx, layer(k.in).c_str(), &m));
    dp_group* g = nullptr;
    DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &g));
    dp_optimizer* opt = nullptr;
    DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "sgd", "lr": 0.1})", &opt));
    std::vector<float> x(6 * 4), y(6 * 3, 0.25f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
    dp_tensor *tx = make_f32(c.ctx, x, {6, 4}), *ty = make_f32(c.ctx, y, {6, 3});
    float loss = 0;
    DP_REQUIRE_OK(dp_group_train_step(g, opt, tx, ty, &loss));
    const std::vector<float> before = params_of(m);
    int64_t steps = 0;
    require_error(dp_group_train_step(g, opt, tx, ty, &loss), DP_ERR_PLUGIN, k.said);
    DP_REQUIRE_OK(dp_optimizer_steps(opt, &steps));
    CHECK(steps == (k.stepped ? 2 : 1));
    CHECK((params_of(m) != before) == k.stepped);
    DP_REQUIRE_OK(dp_group_train_step(g, opt, tx, ty, &loss));
    CHECK(std::isfinite(loss));
    dp_tensor_destroy(tx), dp_tensor_destroy(ty);
    dp_optimizer_destroy(opt);
    dp_group_destroy(g);
    dp_model_destroy(m);
  }
}

// An err the plugin filled to the end without a NUL: the message stops at
// the buffer's end (was read past it).
TEST_CASE("plugins: an err without a terminating NUL is read only up to its capacity") {
  Ctx c;
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, FIXTURE_THROWS));
  dp_model* m = nullptr;
  DP_REQUIRE_OK(dp_model_from_json(
      c.ctx, model_with(R"({"type": "throws", "throw_in": "long_error", "at_step": 0})").c_str(), &m));
  dp_group* g = nullptr;
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0", &g));
  dp_tensor* x = make_f32(c.ctx, std::vector<float>(8, 0.5f), {2, 4});
  dp_tensor* out = nullptr;
  DP_REQUIRE_OK(dp_group_set_training(g, 1));
  CHECK(dp_group_forward(g, x, &out) == DP_ERR_PLUGIN);
  const std::string msg = dp_last_error();
  const size_t a = msg.find("forward failed: A");
  REQUIRE(a != std::string::npos);
  CHECK(msg.substr(a + std::strlen("forward failed: ")) == std::string(1023, 'A'));
  dp_tensor_destroy(x);
  dp_tensor_destroy(out);
  dp_group_destroy(g);
  dp_model_destroy(m);
}

// Misuse the host survives: scratch sizes near SIZE_MAX were rounded up
// through a wrap to a tiny block (a plugin's memset then overran the heap),
// and a registrar kept past init was written through as a dead pointer.
TEST_CASE("plugins: scratch of a size no machine has is NULL; register_layer after init is refused") {
  Ctx c;
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, FIXTURE_THROWS));
  dp_model* m = nullptr;
  DP_REQUIRE_OK(dp_model_from_json(c.ctx, model_with(R"({"type": "throws", "throw_in": "huge_scratch"})").c_str(), &m));
  dp_group* g = nullptr;
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &g));
  dp_tensor* x = make_f32(c.ctx, std::vector<float>(8, 0.5f), {2, 4});
  dp_tensor* out = nullptr;
  DP_REQUIRE_OK(dp_group_forward(g, x, &out));  // the fixture fails forward if any huge scratch is non-NULL
  dp_tensor_destroy(x);
  dp_tensor_destroy(out);
  dp_group_destroy(g);
  dp_model_destroy(m);
  // create calls register_layer with the registrar it kept: refused, nothing registered, context usable.
  DP_REQUIRE_OK(c.build(model_with(R"({"type": "throws", "throw_in": "late_register"})")));
  require_error(c.build(model_with(R"({"type": "throws_late"})")), DP_ERR_MODEL, {"unknown layer type", "throws_late"});
  DP_REQUIRE_OK(c.build(model_with(R"({"type": "throws"})")));
}

TEST_CASE("plugins: a model file loads no code unless allowed: \"plugins\" by path, bare names, DP_PLUGIN_PATH") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("dp_plugins_" + std::to_string(getpid()));
  fs::create_directories(dir / "sub" / "libs");
  fs::copy_file(PLUGIN_SWISH, dir / "sub" / "libs" / "swish.so", fs::copy_options::overwrite_existing);
  fs::copy_file(PLUGIN_SWISH, dir / "sub" / "swish.so", fs::copy_options::overwrite_existing);
  std::string json = R"({"plugins": ["./libs/swish.so", "rms_norm"], "input": {"shape": [4]},
    "layers": [{"type": "swish"}, {"type": "rms_norm"}]})";
  std::ofstream(dir / "sub" / "model.json") << json;
  std::ofstream(dir / "sub" / "bare.json") << R"({"plugins": ["swish"], "input": {"shape": [4]}, "layers": [{"type": "swish"}]})";
  const std::string model = (dir / "sub" / "model.json").string(), bare = (dir / "sub" / "bare.json").string();
  unsetenv("DP_PLUGIN_PATH");
  dp_model* m = nullptr;
  {
    // By default a path in a model file is refused, though the file exists;
    // nothing is loaded.
    Ctx c;
    require_error(dp_model_from_file(c.ctx, model.c_str(), &m), DP_ERR_PLUGIN,
                  {"model.json: /plugins/0", "names the plugin library './libs/swish.so' by path",
                   "DP_CONTEXT_ALLOW_MODEL_PLUGINS", "--allow-model-plugins"});
    CHECK(c.count() == 0);
    CHECK(m == nullptr);
    // A bare name is looked for in DP_PLUGIN_PATH and dp's own plugin folder
    // (<folder of libdp.so>/dp/plugins: an installed copy's is tested by
    // tests/install/use_dp.cpp), not next to the model. This test links dp
    // into its program: no plugin folder, not even one next to the program
    // (dladdr would name the program, whose argv[0] may resolve anywhere).
    fs::path exe = fs::read_symlink("/proc/self/exe");
    fs::path beside = exe.parent_path() / "dp" / "plugins";
    const bool made = !fs::exists(beside);
    fs::create_directories(beside);
    fs::copy_file(PLUGIN_SWISH, beside / "swish.so", fs::copy_options::overwrite_existing);
    require_error(dp_model_from_file(c.ctx, bare.c_str(), &m), DP_ERR_PLUGIN,
                  {"/plugins/0: plugin 'swish' not found", "dp's own plugin folder"});
    fs::remove(beside / "swish.so");
    if (made) fs::remove_all(exe.parent_path() / "dp");
    setenv("DP_PLUGIN_PATH", (dir / "sub" / "libs").c_str(), 1);
    DP_REQUIRE_OK(dp_model_from_file(c.ctx, bare.c_str(), &m));
    dp_model_destroy(m);
    CHECK(c.count() == 1);
    unsetenv("DP_PLUGIN_PATH");
    // A library the program loaded may be named by path: nothing new loads.
    Ctx p;
    DP_REQUIRE_OK(dp_context_load_plugin(p.ctx, (dir / "sub" / "libs" / "swish.so").c_str()));
    DP_REQUIRE_OK(dp_context_load_plugin(p.ctx, PLUGIN_RMS_NORM));
    DP_REQUIRE_OK(dp_model_from_file(p.ctx, model.c_str(), &m));
    dp_model_destroy(m);
    CHECK(p.count() == 2);
  }
  {
    // Allowed by the program: paths relative to the file, bare names in
    // DP_PLUGIN_PATH then next to the model.
    Ctx c;
    REQUIRE(dp_context_set_option(c.ctx, DP_CONTEXT_ALLOW_MODEL_PLUGINS, 2) == DP_ERR_INVALID_ARGUMENT);
    DP_REQUIRE_OK(dp_context_set_option(c.ctx, DP_CONTEXT_ALLOW_MODEL_PLUGINS, 1));
    require_error(dp_model_from_file(c.ctx, model.c_str(), &m), DP_ERR_PLUGIN,
                  {"model.json: /plugins/1: plugin 'rms_norm' not found"});
    setenv("DP_PLUGIN_PATH", ("/nonexistent:" + std::string(PLUGINS_BUILD_DIR)).c_str(), 1);
    DP_REQUIRE_OK(dp_model_from_file(c.ctx, model.c_str(), &m));
    CHECK(c.count() == 2);
    dp_model_destroy(m);
    unsetenv("DP_PLUGIN_PATH");
    Ctx b;
    DP_REQUIRE_OK(dp_context_set_option(b.ctx, DP_CONTEXT_ALLOW_MODEL_PLUGINS, 1));
    DP_REQUIRE_OK(dp_model_from_file(b.ctx, bare.c_str(), &m));
    dp_model_destroy(m);
    // dp_model_from_json: relative to the current directory.
    require_error(c.build(R"({"plugins": ["./libs/nothing.so"], "input": {"shape": [4]}, "layers": [{"type": "relu"}]})"),
                  DP_ERR_PLUGIN, {"/plugins/0", "./libs/nothing.so"});
    require_error(c.build(R"({"plugins": [3], "input": {"shape": [4]}, "layers": [{"type": "relu"}]})"), DP_ERR_MODEL,
                  {"/plugins/0: expected a plugin path"});
  }
  fs::remove_all(dir);
}

// ---- plugin layers through the host's generic checker (tests/gradcheck.h) ----

namespace {
Registry& plugin_registry() {
  static Registry r;
  static Plugins p;
  static bool loaded = false;
  if (!loaded) {
    p.load(r, PLUGIN_SWISH, "");
    p.load(r, PLUGIN_RMS_NORM, "");
    p.load(r, PLUGIN_SHAPE_PROBE, "");
    p.load(r, FIXTURE_PRELU, "");
    loaded = true;
  }
  return r;
}
std::unique_ptr<Layer> make_plugin_layer(const nlohmann::json& j) {
  static std::vector<nlohmann::json> keep;
  keep.push_back(j);
  Args a(keep.back(), "/layers/0");
  a.accept("type");
  std::string type = j.at("type").get<std::string>();
  auto f = plugin_registry().layer(type);
  REQUIRE((f != nullptr));
  auto l = f(a);
  a.finish(type);
  l->type = type;
  l->name = "p";
  l->path = "/layers/0";
  return l;
}
}  // namespace

TEST_CASE("plugins: swish gradients (input and beta), steady state without allocation") {
  auto l = make_plugin_layer({{"type", "swish"}});
  Harness h(*l, {Shape{3, 5}});
  REQUIRE(h.param_specs.size() == 1);
  CHECK(h.param_specs[0].suffix == "beta");
  CHECK(h.param_specs[0].init.kind == Init::kOnes);
  Tensor x = random_tensor(Shape{4, 3, 5}, 3, -3.f, 3.f);
  h.forward({&x});
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = x.f32()[i];
    CHECK(h.out.f32()[i] == doctest::Approx(v / (1 + std::exp(-v))).epsilon(1e-5));
  }
  h.params[0] = 1.7f;
  check_layer(h, {&x});
}

TEST_CASE("plugins: a PReLU plugin's gradients (input and weight, one and per channel)") {
  for (int64_t n : {1, 3}) {
    auto l = make_plugin_layer({{"type", "fixture_prelu"}, {"num_parameters", n}});
    Harness h(*l, {Shape{3, 5}});
    REQUIRE(h.param_specs.size() == 1);
    CHECK(h.param_specs[0].init.kind == Init::kConstant);
    Tensor x = random_tensor(Shape{4, 3, 5}, 5, -3.f, 3.f);
    for (int64_t c = 0; c < n; ++c) h.params[static_cast<size_t>(c)] = 0.1f + 0.3f * float(c);
    check_layer(h, {&x});
  }
}

TEST_CASE("plugins: rms_norm matches nn.RMSNorm, gradients, stats, steady state") {
  for (bool affine : {true, false})
    for (bool training : {true, false}) {
      CAPTURE(affine);
      CAPTURE(training);
      auto l = make_plugin_layer({{"type", "rms_norm"}, {"eps", 1e-5}, {"elementwise_affine", affine}});
      Harness h(*l, {Shape{2, 6}});
      CHECK(h.param_specs.size() == (affine ? 1u : 0u));
      REQUIRE(h.buffer_specs.size() == 1);
      CHECK(h.buffer_specs[0].suffix == "running_ms");
      CHECK(l->stats_size() == 1);
      h.ctx.training = training;
      if (affine) h.randomize_params(4, 0.5f, 1.5f);
      Tensor x = random_tensor(Shape{3, 2, 6}, 9, -2.f, 2.f);
      h.forward({&x});
      double all_ms = 0;
      for (int r = 0; r < 6; ++r) {
        double ms = 0;
        for (int k = 0; k < 6; ++k) ms += double(x.f32()[r * 6 + k]) * x.f32()[r * 6 + k];
        ms /= 6;
        all_ms += ms / 6;
        for (int k = 0; k < 6; ++k)
          CHECK(h.out.f32()[r * 6 + k] ==
                doctest::Approx(x.f32()[r * 6 + k] / std::sqrt(ms + 1e-5) * (affine ? h.params[k] : 1.f)).epsilon(1e-5));
      }
      if (training) CHECK(h.stats[0] == doctest::Approx(all_ms).epsilon(1e-5));
      check_layer(h, {&x}, GradOptions{1e-2, 2e-2});
    }
}

TEST_CASE("plugins: shape_probe passes its last input through, gradient to the last only") {
  auto l = make_plugin_layer({{"type", "shape_probe"}, {"quiet", true}});
  Harness h(*l, {Shape{5}, Shape{2}});
  CHECK(h.out_sample == Shape{2});
  Tensor a = random_tensor(Shape{3, 5}, 1), b = random_tensor(Shape{3, 2}, 2);
  auto r = gradcheck(h, {&a, &b});
  CHECK_MESSAGE(r.ok, r.detail);
}

// ---- N devices vs 1 ----

namespace {
const char* kPluginModel = R"({
  "seed": 5, "input": {"shape": [6]},
  "layers": [
    {"type": "linear", "out_features": 8},
    {"type": "swish", "name": "s"},
    {"type": "rms_norm", "name": "n"},
    {"type": "dropout", "p": 0.2},
    {"type": "linear", "out_features": 5}
  ],
  "loss": {"type": "cross_entropy"}})";

struct Run {
  std::vector<float> params, buffers, losses;
};

Run train(const std::string& devices, const char* opt_json, int64_t batch, int steps) {
  Ctx c;
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, PLUGIN_SWISH));
  DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, PLUGIN_RMS_NORM));
  dp_model* model = nullptr;
  dp_group* group = nullptr;
  dp_optimizer* opt = nullptr;
  DP_REQUIRE_OK(dp_model_from_json(c.ctx, kPluginModel, &model));
  DP_REQUIRE_OK(dp_group_create(model, devices.c_str(), &group));
  DP_REQUIRE_OK(dp_optimizer_create(group, opt_json, &opt));
  Run run;
  for (int step = 0; step < steps; ++step) {
    TestRng rng(500 + step);
    std::vector<float> x(static_cast<size_t>(batch * 6));
    for (float& v : x) v = rng.uniform(-1, 1);
    std::vector<int64_t> t(static_cast<size_t>(batch));
    for (auto& v : t) v = rng.next() % 5;
    dp_tensor *in = make_f32(c.ctx, x, {batch, 6}), *tg = make_i64(c.ctx, t, {batch});
    float loss = 0;
    DP_REQUIRE_OK(dp_group_train_step(group, opt, in, tg, &loss));
    run.losses.push_back(loss);
    dp_tensor_destroy(in);
    dp_tensor_destroy(tg);
  }
  run.params = params_of(model);
  int64_t nb = 0;
  DP_REQUIRE_OK(dp_model_num_buffers(model, &nb));
  run.buffers.resize(static_cast<size_t>(nb));
  DP_REQUIRE_OK(dp_model_copy_buffers(model, run.buffers.data(), nb));
  dp_optimizer_destroy(opt);
  dp_group_destroy(group);
  dp_model_destroy(model);
  return run;
}

}  // namespace

TEST_CASE("plugins: N devices train exactly as one with swish and rms_norm layers") {
  const char* sgd = R"({"type": "sgd", "lr": 0.05, "momentum": 0.9})";
  const char* adam = R"({"type": "adam", "lr": 0.01})";
  for (const char* opt : {sgd, adam})
    for (int64_t batch : {30, 7}) {
      Run one = train("cpu:0", opt, batch, 15);
      REQUIRE(one.buffers.size() == 1);
      CHECK(one.buffers[0] != 1.f);  // running_ms moved
      for (int n : {2, 3, 8}) {
        CAPTURE(opt);
        CAPTURE(batch);
        CAPTURE(n);
        Run many = train(cpu_devices(n), opt, batch, 15);
        require_close(one.params, many.params);
        require_close(one.buffers, many.buffers);
        for (size_t s = 0; s < one.losses.size(); ++s) CHECK(many.losses[s] == doctest::Approx(one.losses[s]).epsilon(1e-5));
      }
    }
}

TEST_CASE("plugins: checkpoints hold plugin parameters and buffers") {
  std::string path = (std::filesystem::temp_directory_path() / ("dp_plugin_ckpt_" + std::to_string(getpid()) + ".ckpt")).string();
  std::string json = std::string(R"({"plugins": [")") + PLUGIN_SWISH + "\", \"" + PLUGIN_RMS_NORM + "\"], " +
                     (kPluginModel + std::string(kPluginModel).find("\"seed\""));
  std::vector<float> saved_p, saved_b;
  {
    Ctx c;
    DP_REQUIRE_OK(dp_context_set_option(c.ctx, DP_CONTEXT_ALLOW_MODEL_PLUGINS, 1));  // absolute paths in the JSON
    dp_model* m = nullptr;
    DP_REQUIRE_OK(dp_model_from_json(c.ctx, json.c_str(), &m));
    int nt = 0;
    DP_REQUIRE_OK(dp_model_num_parameter_tensors(m, &nt));
    std::vector<std::string> names;
    for (int i = 0; i < nt; ++i) {
      const char* name = nullptr;
      int nd = 0;
      int64_t shape[DP_MAX_DIMS];
      DP_REQUIRE_OK(dp_model_parameter_info(m, i, &name, &nd, shape));
      names.push_back(name);
    }
    CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "s.beta", "n.weight", "4.weight", "4.bias"});
    dp_group* g = nullptr;
    dp_optimizer* opt = nullptr;
    DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &g));
    DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "adam", "lr": 0.05})", &opt));
    std::vector<float> x(8 * 6, 0.3f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) / 7.f - 0.4f;
    dp_tensor *in = make_f32(c.ctx, x, {8, 6}), *tg = make_i64(c.ctx, {0, 1, 2, 3, 4, 0, 1, 2}, {8});
    for (int s = 0; s < 3; ++s) DP_REQUIRE_OK(dp_group_train_step(g, opt, in, tg, nullptr));
    DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), g, opt, nullptr, nullptr));
    saved_p = params_of(m);
    saved_b.resize(1);
    DP_REQUIRE_OK(dp_model_copy_buffers(m, saved_b.data(), 1));
    CHECK(saved_p[56] != 1.f);  // s.beta trained
    dp_tensor_destroy(in), dp_tensor_destroy(tg);
    dp_optimizer_destroy(opt), dp_group_destroy(g), dp_model_destroy(m);
  }
  {
    Ctx c;
    DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, PLUGIN_SWISH));  // loaded by the program: the JSON's paths load nothing
    DP_REQUIRE_OK(dp_context_load_plugin(c.ctx, PLUGIN_RMS_NORM));
    dp_model* m = nullptr;
    DP_REQUIRE_OK(dp_model_from_json(c.ctx, json.c_str(), &m));
    dp_group* g = nullptr;
    dp_optimizer* opt = nullptr;
    DP_REQUIRE_OK(dp_group_create(m, "cpu:0", &g));
    DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "adam", "lr": 0.05})", &opt));
    CHECK(params_of(m) != saved_p);
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), g, opt, nullptr));
    CHECK(params_of(m) == saved_p);
    std::vector<float> b(1);
    DP_REQUIRE_OK(dp_model_copy_buffers(m, b.data(), 1));
    CHECK(b == saved_b);
    dp_optimizer_destroy(opt), dp_group_destroy(g), dp_model_destroy(m);
  }
  std::remove(path.c_str());
}
