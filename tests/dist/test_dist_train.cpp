// Training across processes (issue 11), through the C ABI only, with forked
// processes over loopback: P processes with their own CPU devices train as
// one process with all those devices (batch sizes 30, 10 and 7, dropout and
// batch norm, a cross entropy (and an nll) with class weights and ignored rows, SGD with
// momentum and Adam), and without batch norm as one device; two runs of
// one world are bitwise the same; a run resumed from a checkpoint at another
// world size goes on as the uninterrupted one; differing models, optimizers
// and datasets are refused on every process; a rank killed mid-step fails
// its peers' calls with DP_ERR_COMM within seconds.
#include <cstdlib>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../api_util.h"
#include "ranks.h"
#include "train_run.h"

namespace {

void require_same_run(const Result& a, const Result& b, double tol, const char* what) {
  INFO(std::string(what));
  require_close(a.params, b.params, tol, "parameters");
  require_close(a.buffers, b.buffers, tol, "running statistics");
  require_close(a.losses, b.losses, tol, "losses");
  CHECK(std::fabs(a.eval_loss - b.eval_loss) <= tol * std::fmax(1.0, std::fabs(b.eval_loss)));
  CHECK(a.correct == b.correct);
}

bool bitwise_equal(const Result& a, const Result& b) { return a.bytes() == b.bytes(); }

// Rank r of a world on loopback `port` (a 20 s limit): kModel on cpu:0 with
// SGD, for the tests that make their own calls; its handles go with it.
// Every rank succeeded and sent back the same parameters (their bytes).
void require_same_parameters(const std::vector<Outcome>& out) {
  for (const Outcome& o : out) {
    CAPTURE(o.message);
    REQUIRE(o.status == 0);
  }
  for (size_t r = 1; r < out.size(); ++r) CHECK(out[r].message == out[0].message);
}

struct Member {
  dp_context* ctx = nullptr;
  dp_model* model = nullptr;
  dp_process_group* pg = nullptr;
  dp_group* group = nullptr;
  dp_optimizer* opt = nullptr;
  Member(int r, int world, int port) {
    OK(dp_context_create(&ctx));
    OK(dp_model_from_json(ctx, kModel, &model));
    const std::string cfg = "{\"rank\": " + std::to_string(r) + ", \"world_size\": " + std::to_string(world) +
                            ", \"master_port\": " + std::to_string(port) + ", \"timeout_s\": 20}";
    OK(dp_process_group_create(cfg.c_str(), &pg));
    OK(dp_group_create_distributed(model, "cpu:0", pg, &group));
    OK(dp_optimizer_create(group, kSgd, &opt));
  }
  ~Member() {
    dp_optimizer_destroy(opt);
    dp_group_destroy(group);
    dp_process_group_destroy(pg);
    dp_model_destroy(model);
    dp_context_destroy(ctx);
  }
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;
};

}  // namespace

// Batch norm normalises each device's rows by their own statistics, as in
// nn.DataParallel, so a model with it matches one process with the same
// devices (the same split), not one device; without it, one device too.
// Cross entropy with class weights and ignored rows divides by the whole
// batch's weight, which each process sums over its own rows: the processes
// add theirs up before the loss.
TEST_CASE("P processes train exactly as one process with all their devices, and as one device") {
  for (const char* model : {kModel, kModelNoBatchNorm, kModelWeightedLoss, kModelNll}) {
    for (const char* opt : {kSgd, kAdam}) {
      const double tol = opt == kSgd ? 1e-5 : 1e-4;
      for (int64_t batch : {30, 10, 7}) {
        const std::string optimizer = opt, with = model == kModel              ? "batch norm and dropout"
                                                  : model == kModelWeightedLoss ? "dropout, a weighted loss, ignored rows"
                                                  : model == kModelNll          ? "log_softmax, a weighted nll, ignored rows"
                                                                                : "dropout";
        CAPTURE(with);
        CAPTURE(optimizer);
        CAPTURE(batch);
        Setup s;
        s.model = model;
        s.opt = opt;
        s.batch = batch;
        s.ignored = model == kModelWeightedLoss || model == kModelNll;
        s.devices = "cpu:0,cpu:1,cpu:2,cpu:3";
        const Result four = run(s, 0, 0, 0);
        if (model != kModel) {
          s.devices = "cpu:0";
          require_same_run(four, run(s, 0, 0, 0), tol, "1 process x 4 devices against 1 device");
        }

        const std::vector<Result> two_by_two = run_world(s, {"cpu:0,cpu:1", "cpu:0,cpu:1"});
        REQUIRE(bitwise_equal(two_by_two[0], two_by_two[1]));  // every rank holds the same model
        require_same_run(two_by_two[0], four, tol, "2 processes x 2 devices against 1 x 4");

        const std::vector<Result> three = run_world(s, {"cpu:0", "cpu:0,cpu:1", "cpu:0"});  // uneven shares
        for (const Result& r : three) REQUIRE(bitwise_equal(r, three[0]));
        require_same_run(three[0], four, tol, "3 processes (1, 2, 1 devices) against 1 x 4");
      }
    }
  }
}

// clip_grad_norm_ takes the norm of the gradients summed over every device
// of every process: each split sees the same norm and clips alike. (A small
// max_norm, so that most steps clip.) Accumulation over processes: the
// gradients of two batches added, then one step.
TEST_CASE("clip_grad_norm and gradient accumulation across processes: as one process, and as one device") {
  for (int accumulate : {1, 2}) {
    CAPTURE(accumulate);
    Setup s;
    s.model = kModelNoBatchNorm;
    s.batch = 10;
    s.clip = 0.05;
    s.accumulate = accumulate;
    s.devices = "cpu:0,cpu:1,cpu:2,cpu:3";
    const Result four = run(s, 0, 0, 0);
    s.devices = "cpu:0";
    const Result one = run(s, 0, 0, 0);
    require_same_run(four, one, 1e-5, "1 process x 4 devices against 1 device");
    s.clip = 0;
    const Result unclipped = run(s, 0, 0, 0);
    CHECK(unclipped.params != one.params);  // the limit is low enough to clip
    s.clip = 0.05;
    const std::vector<Result> two_by_two = run_world(s, {"cpu:0,cpu:1", "cpu:0,cpu:1"});
    REQUIRE(bitwise_equal(two_by_two[0], two_by_two[1]));
    require_same_run(two_by_two[0], four, 1e-5, "2 processes x 2 devices against 1 x 4");
  }
}

// A layer large enough to report its gradient in pieces (Layer::grad_splits:
// 64 x 3072 weights, 3 blocks of rows) with buckets small enough to end
// inside it: the stage sums pieces over the processes while the layer
// computes the rest, and the result is still one process's.
TEST_CASE("buckets inside a large layer across processes: as one process") {
  Setup s;
  s.model = R"({"seed": 7, "input": {"shape": [6]},
    "layers": [{"type": "linear", "out_features": 64}, {"type": "tanh"}, {"type": "linear", "out_features": 3072},
               {"type": "relu"}, {"type": "linear", "out_features": 5}],
    "loss": {"type": "cross_entropy"}})";
  s.batch = 10;
  setenv("DP_BUCKET_MB", "0.25", 1);
  s.devices = "cpu:0,cpu:1,cpu:2,cpu:3";
  const Result four = run(s, 0, 0, 0);
  const std::vector<Result> two_by_two = run_world(s, {"cpu:0,cpu:1", "cpu:0,cpu:1"});
  unsetenv("DP_BUCKET_MB");
  REQUIRE(bitwise_equal(two_by_two[0], two_by_two[1]));
  require_same_run(two_by_two[0], four, 1e-5, "2 processes x 2 devices against 1 x 4, buckets inside a layer");
}

// The grad scaler decides on the gradients summed over every device of
// every process, so every rank skips, backs off and grows alike, as one
// process with all the devices does. Started at 2^127 with inputs of +-1e3
// (relu, not tanh, so that the first layer's gradients are large too), the
// first steps overflow; then it grows every other step into overflows again.
TEST_CASE("the grad scaler across processes: every rank skips and scales alike, as one process with all the devices") {
  for (int accumulate : {1, 2}) {
    CAPTURE(accumulate);
    Setup s;
    s.model = R"({"seed": 7, "input": {"shape": [6]},
      "layers": [{"type": "linear", "out_features": 12}, {"type": "relu"}, {"type": "dropout", "p": 0.25},
                 {"type": "linear", "out_features": 5}],
      "loss": {"type": "cross_entropy"}})";
    s.input_scale = 1e3f;
    s.batch = 10;
    s.accumulate = accumulate;
    s.clip = 0.05;
    s.scaler = R"({"init_scale": 1.7014118346046923e38, "growth_interval": 2})";
    s.devices = "cpu:0,cpu:1,cpu:2,cpu:3";
    const Result four = run(s, 0, 0, 0);
    REQUIRE(four.losses.back() > 0);  // steps were skipped
    const std::vector<Result> two_by_two = run_world(s, {"cpu:0,cpu:1", "cpu:0,cpu:1"});
    REQUIRE(bitwise_equal(two_by_two[0], two_by_two[1]));
    require_same_run(two_by_two[0], four, 1e-5, "2 processes x 2 devices against 1 x 4, with the grad scaler");
    CHECK(two_by_two[0].losses.back() == four.losses.back());
  }
  // Ranks must configure it alike.
  const int port = free_port();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back([=]() -> std::string {
      Setup s;
      s.scaler = r == 0 ? "{}" : R"({"growth_interval": 100})";
      run(s, r, 2, port);
      return "";
    });
  for (const Outcome& o : run_ranks(ranks, 60)) {
    CAPTURE(o.message);
    CHECK(o.status == 1);
    CHECK(o.message.find("DP_ERR_INVALID_ARGUMENT") != std::string::npos);
    CHECK(o.message.find("rank 1's optimizer settings") != std::string::npos);
    CHECK(o.message.find("\"growth_interval\":100") != std::string::npos);
  }
}

// The optimizer's JSON is compared once, at creation; what is set later
// (set_lr, a schedule, clipping, the grad scaler, steps) before every step:
// set on one rank only, it would train another model there, silently.
TEST_CASE("optimizer settings that differ between ranks: every rank refuses the step, nothing changes") {
  const int port = free_port();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back([=]() -> std::string {
      Member m(r, 2, port);
      std::vector<float> x(4 * 6, 0.25f);
      std::vector<int64_t> y{0, 1, 2, 3};
      dp_tensor* in = make_f32(m.ctx, x, {4, 6});
      dp_tensor* tg = make_i64(m.ctx, y, {4});
      auto params = [&] { return params_of(m.model); };
      auto expect_refused = [&](dp_status st, const char* what, const char* words) {
        const std::string msg = dp_last_error();
        if (st != DP_ERR_INVALID_ARGUMENT || msg.find("rank 1's optimizer settings") == std::string::npos ||
            msg.find(words) == std::string::npos)
          throw std::runtime_error(std::string(what) + ": " + dp_status_name(st) + ": " + msg);
      };
      float loss = 0;
      OK(dp_group_train_step(m.group, m.opt, in, tg, &loss));
      const std::vector<float> before = params();
      // A learning rate set on rank 1 only.
      if (r == 1) OK(dp_optimizer_set_lr(m.opt, 0.5));
      expect_refused(dp_group_train_step(m.group, m.opt, in, tg, &loss), "set_lr on rank 1", "lr 0.5");
      // The same through gradient accumulation's optimizer step.
      OK(dp_group_forward_backward(m.group, in, tg, 1.0, &loss));
      expect_refused(dp_optimizer_step(m.opt), "set_lr on rank 1, optimizer_step", "lr 0.5");
      OK(dp_group_zero_grad(m.group));
      if (params() != before) throw std::runtime_error("a refused step changed the parameters");
      // A schedule on rank 0 only: its first step's lr differs.
      if (r == 1) OK(dp_optimizer_set_lr(m.opt, 0.05));
      if (r == 0) OK(dp_optimizer_set_lr_schedule(m.opt, R"({"type": "step", "step_size": 1, "gamma": 0.5})"));
      expect_refused(dp_group_train_step(m.group, m.opt, in, tg, &loss), "a schedule on rank 0", "schedule step");
      // Clipping on rank 1 only.
      if (r == 0) OK(dp_optimizer_set_lr_schedule(m.opt, nullptr));
      if (r == 1) OK(dp_optimizer_set_clip_grad_norm(m.opt, 1.0));
      expect_refused(dp_group_train_step(m.group, m.opt, in, tg, &loss), "clipping on rank 1", "clip_grad_norm 1");
      if (params() != before) throw std::runtime_error("a refused step changed the parameters");
      // Set alike again: the group trains, the same on both.
      if (r == 1) OK(dp_optimizer_set_clip_grad_norm(m.opt, 0));
      OK(dp_group_train_step(m.group, m.opt, in, tg, &loss));
      const std::vector<float> after = params();
      if (after == before) throw std::runtime_error("the step after the refusals did not train");
      dp_tensor_destroy(in);
      dp_tensor_destroy(tg);
      return std::string(reinterpret_cast<const char*>(after.data()), after.size() * sizeof(float));
    });
  require_same_parameters(run_ranks(ranks, 60));
}

TEST_CASE("two runs of the same world are bitwise the same") {
  Setup s;
  s.batch = 10;
  const std::vector<Result> a = run_world(s, {"cpu:0,cpu:1", "cpu:0,cpu:1"});
  const std::vector<Result> b = run_world(s, {"cpu:0,cpu:1", "cpu:0,cpu:1"});
  CHECK(bitwise_equal(a[0], b[0]));
  CHECK(bitwise_equal(a[1], b[1]));
}

TEST_CASE("a run checkpointed by 4 processes and resumed by 2 goes on as the uninterrupted one") {
  char dir[] = "/tmp/dp_dist_ckpt_XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/ck.dpck";
  for (const char* opt : {kSgd, kAdam}) {
    const std::string optimizer = opt;
    CAPTURE(optimizer);
    Setup s;
    s.opt = opt;
    s.batch = 10;
    s.devices = "cpu:0,cpu:1,cpu:2,cpu:3";
    const Result whole = run(s, 0, 0, 0);

    Setup first = s;
    first.save_after = 5;  // inside the first epoch of 8 batches
    first.save_path = path;
    run_world(first, {"cpu:0", "cpu:0", "cpu:0", "cpu:0"});
    Setup second = s;
    second.resume_path = path;
    const std::vector<Result> rest = run_world(second, {"cpu:0,cpu:1", "cpu:0,cpu:1"});
    const double tol = opt == kSgd ? 1e-5 : 1e-4;
    require_close(rest[0].params, whole.params, tol, "parameters");
    require_close(rest[0].buffers, whole.buffers, tol, "running statistics");
    const std::vector<float> tail(whole.losses.begin() + 5, whole.losses.end());
    require_close(rest[0].losses, tail, tol, "losses after the resume");
    CHECK(rest[0].correct == whole.correct);
  }
  std::remove(path.c_str());
  ::rmdir(dir);
}

namespace {

// forward, then backward of a fixed output gradient, twice (gradients
// accumulate), in training mode with dropout and batch norm: this process's
// output rows and the model's gradients. Rank `rank` of `world` (0: no
// process group), with `devices`, on a global batch of 10 rows.
std::string forward_backward(int rank, int world, int port, const std::string& devices) {
  dp_context* ctx = nullptr;
  dp_model* model = nullptr;
  dp_process_group* pg = nullptr;
  dp_group* group = nullptr;
  OK(dp_context_create(&ctx));
  OK(dp_model_from_json(ctx, kModel, &model));
  if (world > 0) {
    const std::string cfg = "{\"rank\": " + std::to_string(rank) + ", \"world_size\": " + std::to_string(world) +
                            ", \"master_port\": " + std::to_string(port) + ", \"timeout_s\": 30}";
    OK(dp_process_group_create(cfg.c_str(), &pg));
    OK(dp_group_create_distributed(model, devices.c_str(), pg, &group));
  } else {
    OK(dp_group_create(model, devices.c_str(), &group));
  }
  const int64_t batch = 10;
  int count = 0, first = 0;
  OK(dp_group_global_devices(group, &count, &first));
  // This process's rows: its devices' share of the chunk rule's split.
  const int64_t chunk = (batch + count - 1) / count;
  const int64_t begin = std::min<int64_t>(batch, first * chunk);
  int mine = 0;
  OK(dp_group_num_devices(group, &mine));
  const int64_t end = std::min<int64_t>(batch, (first + mine) * chunk);
  TestRng rng(9);
  std::vector<float> x(batch * 6), g(batch * 5);
  for (float& v : x) v = rng.uniform(-1, 1);
  for (float& v : g) v = rng.uniform(-1, 1);
  std::vector<float> xs(x.begin() + begin * 6, x.begin() + end * 6), gs(g.begin() + begin * 5, g.begin() + end * 5);
  const int64_t xshape[] = {end - begin, 6}, gshape[] = {end - begin, 5};
  dp_tensor *in = nullptr, *gout = nullptr, *out = nullptr;
  OK(dp_tensor_from_host(ctx, DP_F32, xs.data(), 2, xshape, &in));
  OK(dp_tensor_from_host(ctx, DP_F32, gs.data(), 2, gshape, &gout));
  OK(dp_group_zero_grad(group));
  std::vector<float> outputs;
  for (int k = 0; k < 2; ++k) {
    OK(dp_group_forward(group, in, &out));
    std::vector<float> o(static_cast<size_t>((end - begin) * 5));
    if (!o.empty()) OK(dp_tensor_copy_to_host(out, o.data(), o.size() * sizeof(float)));
    outputs.insert(outputs.end(), o.begin(), o.end());
    dp_tensor_destroy(out);
    OK(dp_group_backward(group, gout));
  }
  int64_t n = 0;
  OK(dp_model_num_parameters(model, &n));
  std::vector<float> grads(static_cast<size_t>(n));
  OK(dp_model_copy_gradients(model, grads.data(), n));
  dp_tensor_destroy(in);
  dp_tensor_destroy(gout);
  dp_group_destroy(group);
  dp_process_group_destroy(pg);
  dp_model_destroy(model);
  dp_context_destroy(ctx);
  // begin, then the outputs, then the gradients, as bytes.
  std::string r(reinterpret_cast<const char*>(&begin), 8);
  const uint64_t no = outputs.size();
  r.append(reinterpret_cast<const char*>(&no), 8);
  if (no) r.append(reinterpret_cast<const char*>(outputs.data()), no * sizeof(float));
  r.append(reinterpret_cast<const char*>(grads.data()), grads.size() * sizeof(float));
  return r;
}

}  // namespace

TEST_CASE("forward and backward across processes: each process's output rows, the global batch's gradients") {
  const std::string one = forward_backward(0, 0, 0, "cpu:0,cpu:1,cpu:2,cpu:3");
  const int port = free_port();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back([=] { return forward_backward(r, 2, port, "cpu:0,cpu:1"); });
  const std::vector<Outcome> two = run_ranks(ranks, 120);
  auto floats = [](const std::string& s, size_t at, size_t n) {
    std::vector<float> v(n);
    if (n) std::memcpy(v.data(), s.data() + at, n * sizeof(float));
    return v;
  };
  uint64_t n_one = 0;
  std::memcpy(&n_one, one.data() + 8, 8);
  const std::vector<float> out_one = floats(one, 16, n_one);  // 2 passes x 10 rows x 5
  const size_t grads_n = (one.size() - 16 - n_one * 4) / 4;
  const std::vector<float> grads_one = floats(one, 16 + n_one * 4, grads_n);
  for (int r = 0; r < 2; ++r) {
    const Outcome& o = two[static_cast<size_t>(r)];
    INFO("rank " << r << ": " << (o.status == 0 ? std::string("ok") : o.message));
    REQUIRE(o.status == 0);
    int64_t begin = 0;
    uint64_t n = 0;
    std::memcpy(&begin, o.message.data(), 8);
    std::memcpy(&n, o.message.data() + 8, 8);
    const std::vector<float> out = floats(o.message, 16, n);
    const std::vector<float> grads = floats(o.message, 16 + n * 4, grads_n);
    REQUIRE(o.message.size() == 16 + n * 4 + grads_n * 4);
    // Rows [begin, begin + n / 10) of each pass's 10-row output.
    const size_t rows = n / 10;
    std::vector<float> want;
    for (int pass = 0; pass < 2; ++pass)
      want.insert(want.end(), out_one.begin() + static_cast<long>(pass * 50 + begin * 5),
                  out_one.begin() + static_cast<long>(pass * 50 + (begin + rows) * 5));
    require_close(out, want, 1e-6, "this process's output rows");
    require_close(grads, grads_one, 1e-5, "gradients, accumulated over two backward passes");
  }
}

namespace {

// Every rank's error from making a group and an optimizer and sharding a
// loader, with rank 1's model, optimizer or batch size differing.
std::vector<Outcome> mismatched(const char* model1, const char* opt1, int64_t batch1) {
  const int port = free_port();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back([=]() -> std::string {
      Setup s;
      if (r == 1) s.model = model1, s.opt = opt1, s.batch = batch1;
      s.epochs = 1;
      run(s, r, 2, port);
      return "";
    });
  return run_ranks(ranks, 60);
}

}  // namespace

TEST_CASE("a model, optimizer or dataset that differs between ranks is refused on every rank, naming it") {
  const std::string other_model = std::string(kModel).replace(std::string(kModel).find("12"), 2, "13");
  struct Case {
    const char* model;
    const char* opt;
    int64_t batch;
    const char* what;
  } cases[] = {{other_model.c_str(), kSgd, 30, "rank 1's model differs from rank 0's"},
               {kModel, kAdam, 30, "rank 1's optimizer config differs from rank 0's"},
               {kModel, kSgd, 20, "rank 1's dataset or loader differs from rank 0's"}};
  for (const Case& c : cases) {
    CAPTURE(c.what);
    for (const Outcome& o : mismatched(c.model, c.opt, c.batch)) {
      CAPTURE(o.message);
      CHECK(o.status == 1);
      CHECK(o.message.find("DP_ERR_INVALID_ARGUMENT") != std::string::npos);
      CHECK(o.message.find(c.what) != std::string::npos);
    }
  }
}

TEST_CASE("ranks that cut gradients into different buckets (DP_BUCKET_MB) are refused, naming it") {
  const int port = free_port();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back([=]() -> std::string {
      if (r == 1) ::setenv("DP_BUCKET_MB", "0.0001", 1);  // a bucket per layer; rank 0: one bucket
      Setup s;
      run(s, r, 2, port);
      return "";
    });
  for (const Outcome& o : run_ranks(ranks, 60)) {
    CAPTURE(o.message);
    CHECK(o.status == 1);
    CHECK(o.message.find("DP_ERR_INVALID_ARGUMENT") != std::string::npos);
    CHECK(o.message.find("rank 1's gradient bucket layout (DP_BUCKET_MB, DP_SPLIT_LAYERS) differs from rank 0's") !=
          std::string::npos);
  }
}

TEST_CASE("a rank whose devices cannot be used fails every rank at once, naming it") {
  // A device no machine has (nor, here, a CUDA build or GPU), and one that is no device at all.
  for (const std::string bad : {"cuda:99", "tpu:0"}) {
    CAPTURE(bad);
    const int port = free_port();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<RankFn> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.push_back([=]() -> std::string {
        Setup s;
        s.devices = r == 1 ? bad : "cpu:0";
        run(s, r, 2, port);
        return "";
      });
    const std::vector<Outcome> out = run_ranks(ranks, 60);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const Outcome& o : out) {
      CAPTURE(o.message);
      CHECK(o.status == 1);
      CHECK(o.message.find("DP_ERR_DEVICE") != std::string::npos);
      CHECK(o.message.find("rank 1 could not use its devices: device '" + bad + "'") != std::string::npos);
    }
    CHECK(took < 15);  // not the 30 s time limit
  }
}

// A rank that fails on its own between two steps of setting up (a caller's
// error, before it makes its group) and leaves: the others learn at once.
TEST_CASE("a rank that leaves while the others set up: they fail at once, naming it") {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back([=]() -> std::string {
      const std::string cfg = "{\"rank\": " + std::to_string(r) + ", \"world_size\": 2, \"master_port\": " +
                              std::to_string(port) + ", \"timeout_s\": 30}";
      dp_process_group* pg = nullptr;
      OK(dp_process_group_create(cfg.c_str(), &pg));
      if (r == 1) {  // gives up before making its group
        dp_process_group_destroy(pg);
        return "";
      }
      dp_context* ctx = nullptr;
      dp_model* model = nullptr;
      dp_group* group = nullptr;
      OK(dp_context_create(&ctx));
      OK(dp_model_from_json(ctx, kModel, &model));
      const dp_status st = dp_group_create_distributed(model, "cpu:0", pg, &group);
      const std::string msg = dp_last_error();
      dp_group_destroy(group);
      dp_model_destroy(model);
      dp_process_group_destroy(pg);
      dp_context_destroy(ctx);
      if (st != DP_ERR_COMM) throw std::runtime_error("expected DP_ERR_COMM, got " + std::string(dp_status_name(st)));
      return msg;
    });
  const std::vector<Outcome> out = run_ranks(ranks, 60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CAPTURE(out[0].message);
  CHECK(out[0].status == 0);
  CHECK(out[0].message.find("rank 1 left the process group before reaching this step of setting up") != std::string::npos);
  CHECK(took < 15);  // not the 30 s time limit
}

TEST_CASE("errors every process sees alike leave every group usable: a refused tensor, a class out of range, differing calls, a NaN loss") {
  const int port = free_port();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back([=]() -> std::string {
      Member m(r, 2, port);
      dp_context* ctx = m.ctx;
      dp_model* model = m.model;
      dp_group* group = m.group;
      dp_optimizer* opt = m.opt;
      TestRng rng(3 + r);
      std::vector<float> x(4 * 6);
      for (float& v : x) v = rng.uniform(-1, 1);
      std::vector<int64_t> y{0, 1, 2, 3};
      dp_tensor* in = make_f32(ctx, x, {4, 6});
      dp_tensor* tg = make_i64(ctx, y, {4});
      dp_tensor* bad_tg = make_i64(ctx, {0, 1, 2}, {3});
      dp_tensor* bad_class = make_i64(ctx, {0, 1, 7, 3}, {4});
      x[5] = NAN;
      dp_tensor* nan_in = make_f32(ctx, x, {4, 6});
      auto expect = [](bool ok, const std::string& what) {
        if (!ok) throw std::runtime_error(what + ": " + dp_last_error());
      };
      auto params = [&] {
        int64_t n = 0;
        OK(dp_model_num_parameters(model, &n));
        std::vector<float> p(static_cast<size_t>(n));
        OK(dp_model_copy_parameters(model, p.data(), n));
        return p;
      };
      const std::vector<float> before = params();
      float loss = 0;
      int64_t correct = 0;
      // Rank 1's target has the wrong shape: it gets its own error, rank 0 hears of it.
      dp_status s = dp_group_train_step(group, opt, in, r == 1 ? bad_tg : tg, &loss);
      if (r == 1) expect(s == DP_ERR_SHAPE, "rank 1's own refusal");
      else expect(s == DP_ERR_INVALID_ARGUMENT && std::string(dp_last_error()).find("rank 1's train_step was refused") != std::string::npos,
                  "rank 0 told of rank 1's refusal");
      // Rank 1's target holds a class the model does not have: refused before any replica runs, on both.
      s = dp_group_train_step(group, opt, in, r == 1 ? bad_class : tg, &loss);
      if (r == 1) expect(s == DP_ERR_INVALID_ARGUMENT && std::string(dp_last_error()).find("target 7 at row 2 is outside [0, 5)") != std::string::npos,
                         "rank 1's own refusal of its class 7");
      else expect(s == DP_ERR_INVALID_ARGUMENT && std::string(dp_last_error()).find("rank 1's train_step was refused") != std::string::npos,
                  "rank 0 told of rank 1's class 7");
      // Different calls on the two ranks: both refuse, naming them.
      s = r == 0 ? dp_group_evaluate(group, in, tg, &loss, &correct) : dp_group_train_step(group, opt, in, tg, &loss);
      expect(s == DP_ERR_INVALID_ARGUMENT && std::string(dp_last_error()).find("rank 1 called train_step while rank 0 called evaluate") != std::string::npos,
             "differing calls");
      // A NaN on rank 0: the global loss is NaN on both, and nothing changes.
      s = dp_group_train_step(group, opt, r == 0 ? nan_in : in, tg, &loss);
      expect(s == DP_ERR_NUMERIC, "a NaN loss on every rank");
      expect(params() == before, "parameters unchanged by the refused steps");
      // Then the group trains again, on both.
      OK(dp_group_train_step(group, opt, in, tg, &loss));
      const std::vector<float> after = params();
      expect(after != before, "the step after the errors trained");
      for (dp_tensor* t : {in, tg, bad_tg, bad_class, nan_in}) dp_tensor_destroy(t);
      return std::string(reinterpret_cast<const char*>(after.data()), after.size() * sizeof(float));
    });
  require_same_parameters(run_ranks(ranks, 60));
}

// Ctrl-C in one process's shell: that process asks, and every process
// learns of it after the same job (the request rides on each job's gathered
// results), so all leave their loops after the same step.
TEST_CASE("dp_process_group_check_same: a program's own settings compared on every rank; optimizers as parsed") {
  const int port = free_port();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back([=]() -> std::string {
      Member m(r, 3, port);
      std::string seen;
      const dp_status differs = dp_process_group_check_same(m.pg, "epochs", r == 2 ? "5" : "3");
      seen += std::to_string(differs) + "|" + dp_last_error() + "|";
      seen += std::to_string(dp_process_group_check_same(m.pg, "epochs", "3")) + "|";
      seen += std::to_string(dp_process_group_check_same(nullptr, "epochs", "3")) + "|";
      // One config spelt two ways is one optimizer.
      dp_optimizer* opt = nullptr;
      OK(dp_optimizer_create(m.group,
                             r == 0 ? R"({"type": "sgd", "lr": 0.1, "momentum": 0})" : R"({"lr":1e-1,"type":"sgd","momentum":0.0})",
                             &opt));
      dp_optimizer_destroy(opt);
      return seen;
    });
  for (const Outcome& o : run_ranks(ranks, 60)) {
    CAPTURE(o.message);
    REQUIRE(o.status == 0);
    CHECK(o.message == std::to_string(DP_ERR_INVALID_ARGUMENT) +
                           "|rank 2's epochs differs from rank 0's: rank 0 has 3, rank 2 has 5|0|" +
                           std::to_string(DP_ERR_INVALID_ARGUMENT) + "|");
  }
}

TEST_CASE("a stop asked by one rank is agreed by every rank after the same step") {
  const int port = free_port();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back([=]() -> std::string {
      Member m(r, 3, port);
      std::vector<float> x(6 * 6, 0.5f);
      std::vector<int64_t> y{0, 1, 2, 3, 4, 0};
      dp_tensor* in = make_f32(m.ctx, x, {6, 6});
      dp_tensor* tg = make_i64(m.ctx, y, {6});
      std::string seen;  // the count after each job, on this rank
      float loss = 0;
      int64_t correct = 0;
      for (int step = 0; step < 6; ++step) {
        if (r == 2 && step == 2) OK(dp_process_group_request_stop(m.pg));  // between steps 1 and 2
        if (r == 1 && step == 4) OK(dp_process_group_request_stop(m.pg));
        if (step == 3)
          OK(dp_group_evaluate(m.group, in, tg, &loss, &correct));  // an evaluation carries it too
        else
          OK(dp_group_train_step(m.group, m.opt, in, tg, &loss));
        int stopping = -1;
        OK(dp_process_group_stop_requested(m.pg, &stopping));
        seen += std::to_string(stopping);
      }
      dp_tensor_destroy(in);
      dp_tensor_destroy(tg);
      return seen;
    });
  const std::vector<Outcome> out = run_ranks(ranks, 60);
  for (const Outcome& o : out) {
    CAPTURE(o.message);
    REQUIRE(o.status == 0);
    CHECK(o.message == "001122");  // rank 2 asked before job 2, rank 1 before job 4: counted after them, everywhere
  }
  // A world of one process: agreed at once.
  dp_process_group* pg = nullptr;
  REQUIRE(dp_process_group_create(R"({"rank": 0, "world_size": 1})", &pg) == DP_OK);
  int stopping = -1;
  CHECK(dp_process_group_stop_requested(pg, &stopping) == DP_OK);
  CHECK(stopping == 0);
  CHECK(dp_process_group_request_stop(pg) == DP_OK);
  CHECK(dp_process_group_stop_requested(pg, &stopping) == DP_OK);
  CHECK(stopping == 1);
  CHECK(dp_process_group_request_stop(nullptr) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_process_group_stop_requested(pg, nullptr) == DP_ERR_INVALID_ARGUMENT);
  dp_process_group_destroy(pg);
}

TEST_CASE("a rank killed mid-training: the survivors' train_step fails with DP_ERR_COMM within seconds") {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back([=]() -> std::string {
      Member m(r, 3, port);
      dp_context* ctx = m.ctx;
      dp_group* group = m.group;
      dp_optimizer* opt = m.opt;
      std::vector<float> x(4 * 6, 0.5f);
      std::vector<int64_t> y(4, 1);
      dp_tensor* in = make_f32(ctx, x, {4, 6});
      dp_tensor* tg = make_i64(ctx, y, {4});
      for (int step = 0;; ++step) {
        if (r == 1 && step == 3) ::raise(SIGKILL);
        float loss = 0;
        dp_status s = dp_group_train_step(group, opt, in, tg, &loss);  // 12 rows in all: 4 each
        if (s == DP_OK) continue;
        std::string first = std::string(dp_status_name(s)) + ": " + dp_last_error();
        s = dp_group_train_step(group, opt, in, tg, &loss);  // failed for good, at once
        first += std::string(" | then: ") + dp_status_name(s) + ": " + dp_last_error();
        dp_tensor_destroy(in);
        dp_tensor_destroy(tg);
        return first;
      }
    });
  auto out = run_ranks(ranks, 60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(out[1].status == -1);  // the victim
  for (int r : {0, 2}) {
    CAPTURE(out[r].message);
    CHECK(out[r].status == 0);
    CHECK(out[r].message.rfind("DP_ERR_COMM", 0) == 0);
    CHECK(out[r].message.find("| then: DP_ERR_COMM") != std::string::npos);
    CHECK(out[r].message.find("rank 1 died or left") != std::string::npos);  // the lost rank, named
    CHECK(out[r].message.find("cannot be used again") != std::string::npos);
  }
  CHECK(took < 15);  // noticed, not timed out (20 s)
}

TEST_CASE("a process group's start-up: a missing rank is named with the address, a bad config is refused") {
  dp_process_group* pg = nullptr;
  CHECK(dp_process_group_create("{\"rank\": 2, \"world_size\": 2}", &pg) == DP_ERR_MODEL);
  CHECK(std::string(dp_last_error()).find("/rank") != std::string::npos);
  CHECK(dp_process_group_create("{\"world_size\": 2, \"rank\": 0, \"colour\": 1}", &pg) == DP_ERR_MODEL);
  CHECK(dp_process_group_create("{not json", &pg) == DP_ERR_JSON);
  const int port = free_port();
  const std::string cfg = "{\"rank\": 0, \"world_size\": 3, \"master_port\": " + std::to_string(port) + ", \"timeout_s\": 2}";
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(dp_process_group_create(cfg.c_str(), &pg) == DP_ERR_COMM);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string msg = dp_last_error();
  CAPTURE(msg);
  CHECK(msg.find("ranks 1, 2 of 3 did not join") != std::string::npos);
  CHECK(msg.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(took < 10);
  // A world of one needs no peers (nor Gloo).
  REQUIRE(dp_process_group_create("{\"rank\": 0, \"world_size\": 1}", &pg) == DP_OK);
  int rank = -1, world = -1;
  CHECK(dp_process_group_rank(pg, &rank) == DP_OK);
  CHECK(dp_process_group_world_size(pg, &world) == DP_OK);
  CHECK((rank == 0 && world == 1));
  CHECK(dp_process_group_barrier(pg) == DP_OK);
  dp_process_group_destroy(pg);
  dp_process_group_destroy(nullptr);
}
