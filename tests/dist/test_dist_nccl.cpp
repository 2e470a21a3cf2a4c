// GPUs across processes (issue 11): NCCL over every process's GPUs
// (ncclCommInitRankConfig, the unique id handed out through the process group),
// through the C ABI, with forked processes on one machine. Needs two GPUs:
// it exits 77 (skipped) with fewer.
//   - 2 processes x 1 GPU train as 1 process x 2 GPUs (batch norm, dropout,
//     SGD with momentum; batch sizes 30 and 7), and the ranks hold the same
//     bits;
//   - a rank on CPUs and a rank on GPUs are refused on both;
//   - a rank killed mid-epoch fails the survivor's step with DP_ERR_COMM
//     within its time limit.
// CUDA is never initialised in the parent: a forked child could not use it.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>
#include <string>
#include <vector>

#define DOCTEST_CONFIG_IMPLEMENT
#include "train_run.h"

TEST_CASE("2 processes x 1 GPU train as 1 process x 2 GPUs, and every rank holds the same bits") {
  for (int64_t batch : {30, 7}) {
    CAPTURE(batch);
    Setup s;
    s.batch = batch;
    s.devices = "cuda:0,cuda:1";
    auto one = run_ranks({[=] { return run(s, 0, 0, 0).bytes(); }}, 300);  // CUDA only in children
    REQUIRE_MESSAGE(one[0].status == 0, one[0].message);
    const std::vector<Result> two = run_world(s, {"cuda:0", "cuda:1"});
    CHECK(two[0].bytes() == two[1].bytes());  // bitwise, every rank
    const Result want = Result::from(one[0].message);
    double worst = 0;  // parameters and running statistics, relative to 1 + |value|
    for (auto [got, ref] : {std::make_pair(&two[0].params, &want.params), std::make_pair(&two[0].buffers, &want.buffers)}) {
      REQUIRE(got->size() == ref->size());
      for (size_t i = 0; i < ref->size(); ++i)
        worst = std::fmax(worst, std::fabs((*got)[i] - (*ref)[i]) / (1 + std::fabs((*ref)[i])));
    }
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("a rank on CPUs and a rank on GPUs are refused on both, naming the rank") {
  const int port = free_port();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back([=] {
      Setup s;
      s.devices = r == 0 ? "cpu:0" : "cuda:0";
      return run(s, r, 2, port).bytes();
    });
  for (const Outcome& o : run_ranks(ranks, 120)) {
    CAPTURE(o.message);
    CHECK(o.status == 1);
    CHECK(o.message.find("DP_ERR_DEVICE") != std::string::npos);
    CHECK(o.message.find("runs on CPUs on every rank or on GPUs on every rank") != std::string::npos);
  }
}

TEST_CASE("a rank killed mid-epoch: the survivor's step fails with DP_ERR_COMM within its time limit") {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back([=] {
      Setup s;
      s.batch = 7;
      s.devices = "cuda:" + std::to_string(r);
      if (r == 1) s.die_after = 3;
      return run(s, r, 2, port).bytes();
    });
  auto out = run_ranks(ranks, 120);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CAPTURE(out[0].message);
  CHECK(out[1].status == -1);  // the victim
  CHECK(out[0].status == 1);
  CHECK(out[0].message.find("DP_ERR_COMM") != std::string::npos);
  CHECK(took < 70);  // the 30 s limit, with start-up
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
