// Out of memory in the middle of a step: every allocation of a training step
// that grows its activations fails in turn (tests/alloc_counter.cpp), and each
// failure must return DP_ERR_OUT_OF_MEMORY, leave the parameters, the running
// statistics and the optimizer state as they were, and let the next step run
// exactly as if nothing had failed. And a process killed (SIGKILL) while it
// saves checkpoints leaves a whole checkpoint on disk, every time.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "alloc_counter.h"
#include "api_util.h"

namespace {

const char* kModel = R"({"seed": 3, "input": {"shape": [1, 8, 8]},
  "layers": [{"type": "conv2d", "out_channels": 3, "kernel_size": 3, "padding": 1, "name": "c"},
             {"type": "batch_norm"}, {"type": "relu", "name": "r"}, {"type": "add", "inputs": ["r", "c"]},
             {"type": "max_pool2d", "kernel_size": 2}, {"type": "dropout", "p": 0.25},
             {"type": "flatten"}, {"type": "linear", "out_features": 5}],
  "loss": {"type": "cross_entropy"}})";

struct Setup {
  dp_context* ctx = nullptr;
  dp_model* m = nullptr;
  dp_group* g = nullptr;
  dp_optimizer* opt = nullptr;
  dp_tensor *x8 = nullptr, *y8 = nullptr, *x16 = nullptr, *y16 = nullptr;

  Setup(const char* devices, const char* opt_json) {
    DP_REQUIRE_OK(dp_context_create(&ctx));
    DP_REQUIRE_OK(dp_model_from_json(ctx, kModel, &m));
    DP_REQUIRE_OK(dp_group_create(m, devices, &g));
    DP_REQUIRE_OK(dp_group_set_option(g, DP_GROUP_THREADS_PER_DEVICE, 2));
    DP_REQUIRE_OK(dp_optimizer_create(g, opt_json, &opt));
    TestRng rng(7);
    std::vector<float> x(16 * 64);
    for (float& v : x) v = rng.uniform(-1, 1);
    std::vector<int64_t> y(16);
    for (int i = 0; i < 16; ++i) y[i] = i % 5;
    x8 = make_f32(ctx, std::vector<float>(x.begin(), x.begin() + 8 * 64), {8, 1, 8, 8});
    y8 = make_i64(ctx, std::vector<int64_t>(y.begin(), y.begin() + 8), {8});
    x16 = make_f32(ctx, x, {16, 1, 8, 8});
    y16 = make_i64(ctx, y, {16});
  }
  ~Setup() {
    for (dp_tensor* t : {x8, y8, x16, y16}) dp_tensor_destroy(t);
    dp_optimizer_destroy(opt);
    dp_group_destroy(g);
    dp_model_destroy(m);
    dp_context_destroy(ctx);
  }
  std::vector<float> buffers() const {
    int64_t n = 0;
    REQUIRE(dp_model_num_buffers(m, &n) == DP_OK);
    std::vector<float> b(static_cast<size_t>(n));
    REQUIRE(dp_model_copy_buffers(m, b.data(), n) == DP_OK);
    return b;
  }
};

}  // namespace

TEST_CASE("a DP_BUCKET_MB that is not a size: refused at group creation, naming it") {
  dp_context* ctx = nullptr;
  dp_model* m = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  DP_REQUIRE_OK(dp_model_from_json(ctx, kModel, &m));
  for (const char* bad : {"-3", "0", "abc", "1x", "nan"}) {
    CAPTURE(bad);
    setenv("DP_BUCKET_MB", bad, 1);
    dp_group* g = nullptr;
    CHECK(dp_group_create(m, "cpu:0,cpu:1", &g) == DP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(dp_last_error()).find(std::string("DP_BUCKET_MB=") + bad + ": expected the gradient bucket size") !=
          std::string::npos);
    CHECK(g == nullptr);
  }
  setenv("DP_BUCKET_MB", "0.5", 1);
  dp_group* g = nullptr;
  CHECK(dp_group_create(m, "cpu:0,cpu:1", &g) == DP_OK);
  unsetenv("DP_BUCKET_MB");
  dp_group_destroy(g);
  dp_model_destroy(m);
  dp_context_destroy(ctx);
}

TEST_CASE("a failed allocation inside a step: DP_ERR_OUT_OF_MEMORY, nothing changed, the next step exact") {
  // A gradient bucket per layer: the sums (and, in steps that allocate
  // nothing, the updates) of later layers overlap the backward of earlier ones.
  setenv("DP_BUCKET_MB", "0.0001", 1);
  for (std::string devices_s : {"cpu:0", "cpu:0,cpu:1,cpu:2"}) {
    for (std::string opt_s : {R"({"type": "adam", "lr": 0.01})", R"({"type": "sgd", "lr": 0.05, "momentum": 0.9})"}) {
      CAPTURE(devices_s);
      CAPTURE(opt_s);
      const char *devices = devices_s.c_str(), *opt = opt_s.c_str();
      // What two steps (8 rows, then 16: more than ever) and a third give.
      std::vector<float> want_p, want_b;
      {
        Setup s(devices, opt);
        for (auto* xy : {&s.x8, &s.x16, &s.x16}) {
          dp_tensor* y = *xy == s.x8 ? s.y8 : s.y16;
          DP_REQUIRE_OK(dp_group_train_step(s.g, s.opt, *xy, y, nullptr));
        }
        want_p = params_of(s.m);
        want_b = s.buffers();
      }
      // The second step fails at its nth allocation, for every n it makes.
      int failures = 0;
      for (long nth = 1;; ++nth) {
        Setup s(devices, opt);
        DP_REQUIRE_OK(dp_group_train_step(s.g, s.opt, s.x8, s.y8, nullptr));
        const std::vector<float> p = params_of(s.m), b = s.buffers();
        dp::test::fail_allocation(nth);
        float loss = -1;
        const dp_status st = dp_group_train_step(s.g, s.opt, s.x16, s.y16, &loss);
        dp::test::fail_allocation(0);
        if (st == DP_OK) {  // the step made fewer than nth allocations
          DP_REQUIRE_OK(dp_group_train_step(s.g, s.opt, s.x16, s.y16, nullptr));
          CHECK(params_of(s.m) == want_p);
          break;
        }
        ++failures;
        CAPTURE(nth);
        INFO(dp_last_error());
        REQUIRE(st == DP_ERR_OUT_OF_MEMORY);
        CHECK(loss == -1.f);  // out-parameters untouched
        REQUIRE(params_of(s.m) == p);
        REQUIRE(s.buffers() == b);
        // The failed step counted nothing: the same two steps give the same
        // result, bitwise (optimizer state and step count unchanged).
        DP_REQUIRE_OK(dp_group_train_step(s.g, s.opt, s.x16, s.y16, nullptr));
        DP_REQUIRE_OK(dp_group_train_step(s.g, s.opt, s.x16, s.y16, nullptr));
        REQUIRE(params_of(s.m) == want_p);
        REQUIRE(s.buffers() == want_b);
        REQUIRE(nth < 10000);
      }
      MESSAGE(devices_s << ", " << opt_s << ": " << failures << " allocations of the growing step failed in turn");
      CHECK(failures > 3);
    }
  }
}

TEST_CASE("kill -9 during checkpoint saves: the file on disk is always one whole checkpoint that loads") {
  char dir[] = "/tmp/dp_kill_save_XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/ck.safetensors";
  const char* big = R"({"seed": 1, "input": {"shape": [256]}, "layers": [{"type": "linear", "out_features": 512},
    {"type": "relu"}, {"type": "linear", "out_features": 10}], "loss": {"type": "cross_entropy"}})";
  auto make = [&](dp_context** ctx, dp_model** m, dp_group** g, dp_optimizer** o) {
    return dp_context_create(ctx) == DP_OK && dp_model_from_json(*ctx, big, m) == DP_OK &&
           dp_group_create(*m, "cpu:0", g) == DP_OK && dp_optimizer_create(*g, R"({"type": "adam"})", o) == DP_OK;
  };
  int killed_mid_write = 0;
  TestRng rng(11);
  for (int trial = 0; trial < 12; ++trial) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // saves checkpoints back to back until killed
      dp_context* ctx;
      dp_model* m;
      dp_group* g;
      dp_optimizer* o;
      if (!make(&ctx, &m, &g, &o)) ::_exit(3);
      dp_tensor* x = make_f32(ctx, std::vector<float>(8 * 256, 0.25f), {8, 256});
      dp_tensor* y = make_i64(ctx, std::vector<int64_t>(8, 1), {8});
      for (int step = 0;; ++step) {
        if (dp_group_train_step(g, o, x, y, nullptr) != DP_OK) ::_exit(4);
        const std::string meta = "{\"step\": " + std::to_string(step) + "}";
        if (dp_checkpoint_save(path.c_str(), g, o, nullptr, meta.c_str()) != DP_OK) ::_exit(5);
      }
    }
    ::usleep(20000 + rng.next() % 80000);
    ::kill(pid, SIGKILL);
    int st = 0;
    ::waitpid(pid, &st, 0);
    REQUIRE(WIFSIGNALED(st));
    // A temporary file left behind means the kill came mid-write.
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().string() != path) {
        ++killed_mid_write;
        std::filesystem::remove(e.path());
      }
    if (!std::filesystem::exists(path)) continue;  // killed before the first save finished
    dp_context* ctx;
    dp_model* m;
    dp_group* g;
    dp_optimizer* o;
    REQUIRE(make(&ctx, &m, &g, &o));
    INFO("trial " << trial);
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), g, o, nullptr));
    dp_optimizer_destroy(o);
    dp_group_destroy(g);
    dp_model_destroy(m);
    dp_context_destroy(ctx);
  }
  MESSAGE(killed_mid_write << " of 12 kills came while a checkpoint was being written");
  std::filesystem::remove_all(dir);
}
