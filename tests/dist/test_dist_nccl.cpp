// GPUs across processes (issue 11): NCCL over every process's GPUs
// (ncclCommInitRank, the unique id handed out through the process group),
// through the C ABI, with forked processes on one machine. Needs two GPUs:
// it exits 77 (skipped) with fewer.
//   - 2 processes x 1 GPU train as 1 process x 2 GPUs (batch norm, dropout,
//     SGD with momentum; batch sizes 30 and 7), and the ranks hold the same
//     bits;
//   - a rank on CPUs and a rank on GPUs are refused on both;
//   - a rank killed mid-epoch fails the survivor's step with DP_ERR_COMM
//     within its time limit.
// CUDA is never initialised in the parent: a forked child could not use it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#define DOCTEST_CONFIG_IMPLEMENT
#include "../api_util.h"
#include "ranks.h"

namespace {

const char* kModel = R"({"seed": 7, "input": {"shape": [6]},
  "layers": [{"type": "linear", "out_features": 12, "bias": false}, {"type": "batch_norm1d"}, {"type": "relu"},
             {"type": "dropout", "p": 0.25}, {"type": "linear", "out_features": 5}],
  "loss": {"type": "cross_entropy"}})";
const char* kSgd = R"({"type": "sgd", "lr": 0.05, "momentum": 0.9})";
const int64_t kSamples = 71;

void ok(dp_status s, const char* what) {
  if (s != DP_OK) throw std::runtime_error(std::string(what) + ": " + dp_status_name(s) + ": " + dp_last_error());
}
#define OK(call) ok((call), #call)

// One process's epoch: world 0 is no process group. Returns the parameters
// then the buffers, as bytes. `die_after` >= 0: this process kills itself
// after that many steps.
std::string run(int rank, int world, int port, const std::string& devices, int64_t batch, int die_after = -1) {
  dp_context* ctx = nullptr;
  dp_model* model = nullptr;
  dp_process_group* pg = nullptr;
  dp_group* group = nullptr;
  dp_optimizer* opt = nullptr;
  dp_dataset* ds = nullptr;
  dp_loader* loader = nullptr;
  OK(dp_context_create(&ctx));
  OK(dp_model_from_json(ctx, kModel, &model));
  if (world > 0) {
    const std::string cfg = "{\"rank\": " + std::to_string(rank) + ", \"world_size\": " + std::to_string(world) +
                            ", \"master_addr\": \"127.0.0.1\", \"master_port\": " + std::to_string(port) + ", \"timeout_s\": 20}";
    OK(dp_process_group_create(cfg.c_str(), &pg));
    OK(dp_group_create_distributed(model, devices.c_str(), pg, &group));
  } else {
    OK(dp_group_create(model, devices.c_str(), &group));
  }
  OK(dp_optimizer_create(group, kSgd, &opt));
  TestRng rng(42);
  std::vector<float> x(static_cast<size_t>(kSamples * 6));
  std::vector<int64_t> y(static_cast<size_t>(kSamples));
  for (float& v : x) v = rng.uniform(-1, 1);
  for (auto& v : y) v = rng.next() % 5;
  const int64_t sample_shape[] = {6};
  OK(dp_dataset_from_arrays(ctx, x.data(), 1, sample_shape, kSamples, DP_I64, y.data(), 0, nullptr, 0, &ds));
  const std::string lcfg = "{\"batch_size\": " + std::to_string(batch) + ", \"shuffle\": true, \"seed\": 3}";
  OK(dp_loader_create(ds, lcfg.c_str(), &loader));
  if (world > 0) OK(dp_loader_shard(loader, group));
  const int64_t shape0[] = {0, 6}, tshape0[] = {0};
  dp_tensor *in = nullptr, *tg = nullptr;
  OK(dp_tensor_create(ctx, DP_F32, 2, shape0, &in));
  OK(dp_tensor_create(ctx, DP_I64, 1, tshape0, &tg));
  int64_t rows = 0;
  for (int step = 0; OK(dp_loader_next(loader, in, tg, &rows)), rows > 0; ++step) {
    if (step == die_after) ::raise(SIGKILL);
    float loss = 0;
    OK(dp_group_train_step(group, opt, in, tg, &loss));
  }
  int64_t n = 0, b = 0;
  OK(dp_model_num_parameters(model, &n));
  OK(dp_model_num_buffers(model, &b));
  std::vector<float> out(static_cast<size_t>(n + b));
  OK(dp_model_copy_parameters(model, out.data(), n));
  OK(dp_model_copy_buffers(model, out.data() + n, b));
  dp_tensor_destroy(in);
  dp_tensor_destroy(tg);
  dp_loader_destroy(loader);
  dp_dataset_destroy(ds);
  dp_optimizer_destroy(opt);
  dp_group_destroy(group);
  dp_process_group_destroy(pg);
  dp_model_destroy(model);
  dp_context_destroy(ctx);
  return std::string(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(float));
}

std::vector<float> floats(const std::string& s) {
  std::vector<float> v(s.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace

TEST_CASE("2 processes x 1 GPU train as 1 process x 2 GPUs, and every rank holds the same bits") {
  for (int64_t batch : {30, 7}) {
    CAPTURE(batch);
    auto one = run_ranks({[=] { return run(0, 0, 0, "cuda:0,cuda:1", batch); }}, 300);
    REQUIRE_MESSAGE(one[0].status == 0, one[0].message);
    const int port = free_port();
    auto two = run_ranks({[=] { return run(0, 2, port, "cuda:0", batch); }, [=] { return run(1, 2, port, "cuda:1", batch); }}, 300);
    for (const Outcome& o : two) REQUIRE_MESSAGE(o.status == 0, o.message);
    CHECK(two[0].message == two[1].message);  // bitwise, every rank
    const std::vector<float> want = floats(one[0].message), got = floats(two[0].message);
    REQUIRE(got.size() == want.size());
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::fmax(worst, std::fabs(got[i] - want[i]) / (1 + std::fabs(want[i])));
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("a rank on CPUs and a rank on GPUs are refused on both, naming the rank") {
  const int port = free_port();
  auto out = run_ranks({[=] { return run(0, 2, port, "cpu:0", 30); }, [=] { return run(1, 2, port, "cuda:0", 30); }}, 120);
  for (const Outcome& o : out) {
    CAPTURE(o.message);
    CHECK(o.status == 1);
    CHECK(o.message.find("DP_ERR_DEVICE") != std::string::npos);
    CHECK(o.message.find("runs on CPUs on every rank or on GPUs on every rank") != std::string::npos);
  }
}

TEST_CASE("a rank killed mid-epoch: the survivor's step fails with DP_ERR_COMM within its time limit") {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  auto out = run_ranks({[=] { return run(0, 2, port, "cuda:0", 7); }, [=] { return run(1, 2, port, "cuda:1", 7, 3); }}, 120);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CAPTURE(out[0].message);
  CHECK(out[1].status == -1);  // the victim
  CHECK(out[0].status == 1);
  CHECK(out[0].message.find("DP_ERR_COMM") != std::string::npos);
  CHECK(took < 60);  // the 20 s limit, with start-up
}

// Counts GPUs in a child, so that this process never initialises CUDA.
int main(int argc, char** argv) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int count = 0;
    const char* why = nullptr;
    if (dp_device_count("cuda", &count, &why) != DP_OK) count = 0;
    if (count < 2) std::printf("dist_nccl: SKIP: %d CUDA device(s), 2 needed%s%s\n", count, why && *why ? ": " : "", why ? why : "");
    std::fflush(stdout);
    ::_exit(count > 100 ? 100 : count);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (!WIFEXITED(st)) {
    std::printf("dist_nccl: FAIL: counting the GPUs crashed (signal %d)\n", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return 1;
  }
  if (WEXITSTATUS(st) < 2) return 77;
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
