// One process's training run through the C ABI, for the tests of training
// across processes (test_dist_train, test_dist_nccl): a small model with
// batch norm and dropout on random data, a sharded loader, an epoch or more,
// then an evaluation; what it leaves as bytes a forked child can send back.
#pragma once
#include <signal.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../api_util.h"
#include "ranks.h"

namespace {

const char* const kModel = R"({"seed": 7, "input": {"shape": [6]},
  "layers": [{"type": "linear", "out_features": 12, "bias": false}, {"type": "batch_norm1d"}, {"type": "relu"},
             {"type": "dropout", "p": 0.25}, {"type": "linear", "out_features": 5}],
  "loss": {"type": "cross_entropy"}})";
const char* const kModelNoBatchNorm = R"({"seed": 7, "input": {"shape": [6]},
  "layers": [{"type": "linear", "out_features": 12}, {"type": "tanh"}, {"type": "dropout", "p": 0.25},
             {"type": "linear", "out_features": 5}],
  "loss": {"type": "cross_entropy"}})";
// Cross entropy as PyTorch's with class weights, ignore_index and label
// smoothing (Setup::ignored makes about a sixth of the targets -100).
const char* const kModelWeightedLoss = R"({"seed": 7, "input": {"shape": [6]},
  "layers": [{"type": "linear", "out_features": 12}, {"type": "tanh"}, {"type": "dropout", "p": 0.25},
             {"type": "linear", "out_features": 5}],
  "loss": {"type": "cross_entropy", "weight": [0.5, 2, 1, 0.25, 3], "ignore_index": -100, "label_smoothing": 0.1}})";
// log_softmax then nll, with class weights and ignored rows (nll's mean divides as cross entropy's).
const char* const kModelNll = R"({"seed": 7, "input": {"shape": [6]},
  "layers": [{"type": "linear", "out_features": 12}, {"type": "tanh"}, {"type": "dropout", "p": 0.25},
             {"type": "linear", "out_features": 5}, {"type": "log_softmax"}],
  "loss": {"type": "nll", "weight": [0.5, 2, 1, 0.25, 3], "ignore_index": -100}})";
const char* const kSgd = R"({"type": "sgd", "lr": 0.05, "momentum": 0.9})";
const char* const kAdam = R"({"type": "adam", "lr": 0.01})";
const int64_t kSamples = 71;  // batches of 30: 30, 30, 11; of 7: ten of 7 and one of 1

void ok(dp_status s, const char* what) {
  if (s != DP_OK) throw std::runtime_error(std::string(what) + ": " + dp_status_name(s) + ": " + dp_last_error());
}
#define OK(call) ok((call), #call)

// What a run leaves: parameters, buffers and the losses of its steps, then
// the evaluation's loss and correct count. Bytes, so that a child can send it.
struct Result {
  std::vector<float> params, buffers, losses;
  float eval_loss = 0;
  int64_t correct = 0;
  std::string bytes() const {
    std::string s;
    for (const auto* v : {&params, &buffers, &losses}) {
      const uint64_t n = v->size();
      s.append(reinterpret_cast<const char*>(&n), 8);
      if (n > 0) s.append(reinterpret_cast<const char*>(v->data()), n * sizeof(float));
    }
    s.append(reinterpret_cast<const char*>(&eval_loss), 4);
    s.append(reinterpret_cast<const char*>(&correct), 8);
    return s;
  }
  static Result from(const std::string& s) {
    Result r;
    size_t at = 0;
    for (auto* v : {&r.params, &r.buffers, &r.losses}) {
      REQUIRE(s.size() >= at + 8);
      uint64_t n = 0;
      std::memcpy(&n, s.data() + at, 8);
      at += 8;
      REQUIRE(s.size() >= at + n * sizeof(float));
      v->resize(n);
      if (n > 0) std::memcpy(v->data(), s.data() + at, n * sizeof(float));
      at += n * sizeof(float);
    }
    REQUIRE(s.size() == at + 12);
    std::memcpy(&r.eval_loss, s.data() + at, 4);
    std::memcpy(&r.correct, s.data() + at + 4, 8);
    return r;
  }
};

struct Setup {
  const char* model = kModel;
  const char* opt = kSgd;
  int64_t batch = 30;
  int64_t samples = kSamples;
  int epochs = 1;
  std::string devices = "cpu:0";
  // Checkpoints: after `save_after` steps, save to `path` and stop; or
  // resume from `path` first.
  int save_after = -1;
  std::string save_path, resume_path;
  int die_after = -1;  // >= 0: the process kills itself (SIGKILL) before that step
  // clip_grad_norm (0: off; each step's norm then follows its loss in
  // Result::losses); gradient accumulation over `accumulate` batches
  // (dp_group_forward_backward with 1/accumulate, a step after each
  // `accumulate` batches and after an epoch's last).
  double clip = 0;
  int accumulate = 1;
  // The grad scaler's JSON ("": off); each step's scale (before the step)
  // and the steps skipped so far then follow its loss (and norm) in
  // Result::losses.
  std::string scaler;
  float input_scale = 1;  // the inputs are uniform in [-input_scale, input_scale]
  bool ignored = false;   // targets in [0, 5) and -100 (ignore_index), instead of [0, 5)
};

// One process's run: with world > 1, rank `rank` of a process group on
// loopback `port`; world 0: no process group at all (dp_group_create).
Result run(const Setup& s, int rank, int world, int port) {
  dp_context* ctx = nullptr;
  dp_model* model = nullptr;
  dp_process_group* pg = nullptr;
  dp_group* group = nullptr;
  dp_optimizer* opt = nullptr;
  dp_dataset* ds = nullptr;
  dp_loader *loader = nullptr, *eval_loader = nullptr;
  OK(dp_context_create(&ctx));
  OK(dp_model_from_json(ctx, s.model, &model));
  if (world > 0) {
    const std::string cfg = "{\"rank\": " + std::to_string(rank) + ", \"world_size\": " + std::to_string(world) +
                            ", \"master_addr\": \"127.0.0.1\", \"master_port\": " + std::to_string(port) + ", \"timeout_s\": 30}";
    OK(dp_process_group_create(cfg.c_str(), &pg));
    OK(dp_group_create_distributed(model, s.devices.c_str(), pg, &group));
  } else {
    OK(dp_group_create(model, s.devices.c_str(), &group));
  }
  OK(dp_optimizer_create(group, s.opt, &opt));
  if (s.clip > 0) OK(dp_optimizer_set_clip_grad_norm(opt, s.clip));
  if (!s.scaler.empty()) OK(dp_optimizer_set_grad_scaler(opt, s.scaler.c_str()));

  TestRng rng(42);
  std::vector<float> x(static_cast<size_t>(s.samples * 6));
  std::vector<int64_t> y(static_cast<size_t>(s.samples));
  for (float& v : x) v = rng.uniform(-s.input_scale, s.input_scale);
  for (auto& v : y) {
    v = rng.next() % (s.ignored ? 6 : 5);
    if (v == 5) v = -100;
  }
  const int64_t sample_shape[] = {6};
  OK(dp_dataset_from_arrays(ctx, x.data(), 1, sample_shape, s.samples, DP_I64, y.data(), 0, nullptr, 0, &ds));
  const std::string lcfg = "{\"batch_size\": " + std::to_string(s.batch) + ", \"shuffle\": true, \"seed\": 3}";
  OK(dp_loader_create(ds, lcfg.c_str(), &loader));
  OK(dp_loader_create(ds, "{\"batch_size\": 16}", &eval_loader));
  if (world > 0) {
    OK(dp_loader_shard(loader, group));
    OK(dp_loader_shard(eval_loader, group));
  }
  if (!s.resume_path.empty()) OK(dp_checkpoint_load(s.resume_path.c_str(), group, opt, loader));

  Result res;
  const int64_t shape0[] = {0, 6}, tshape0[] = {0};
  dp_tensor *in = nullptr, *tg = nullptr;
  OK(dp_tensor_create(ctx, DP_F32, 2, shape0, &in));
  OK(dp_tensor_create(ctx, DP_I64, 1, tshape0, &tg));
  int steps = 0;
  int64_t epoch = 0, b = 0;
  OK(dp_loader_position(loader, &epoch, &b));
  for (; epoch < s.epochs; ++epoch) {
    int64_t rows = 0;
    while (OK(dp_loader_next(loader, in, tg, &rows)), rows > 0) {
      if (steps == s.die_after) ::raise(SIGKILL);
      float loss = 0;
      int64_t batches = 0, pos_epoch = 0, pos_batch = 0;
      OK(dp_loader_num_batches(loader, &batches));
      OK(dp_loader_position(loader, &pos_epoch, &pos_batch));  // pos_batch: batches read this epoch
      double scale = 1;  // the grad scaler's (1 when off): forward_backward's gradients are scaled by the caller
      int64_t skipped = 0;
      OK(dp_optimizer_grad_scaler_state(opt, &scale, nullptr, nullptr));
      if (s.accumulate > 1) {
        OK(dp_group_forward_backward(group, in, tg, scale / s.accumulate, &loss));
        res.losses.push_back(loss);
        if (pos_batch % s.accumulate != 0 && pos_batch != batches) continue;
        OK(dp_optimizer_step(opt));
        OK(dp_group_zero_grad(group));
      } else {
        OK(dp_group_train_step(group, opt, in, tg, &loss));
        res.losses.push_back(loss);
      }
      if (s.clip > 0) {
        double norm = 0;
        OK(dp_optimizer_grad_norm(opt, &norm));
        res.losses.push_back(static_cast<float>(norm));
      }
      if (!s.scaler.empty()) {
        OK(dp_optimizer_grad_scaler_state(opt, nullptr, nullptr, &skipped));
        res.losses.push_back(static_cast<float>(scale));
        res.losses.push_back(static_cast<float>(skipped));
      }
      if (++steps == s.save_after) {
        OK(dp_checkpoint_save(s.save_path.c_str(), group, opt, loader, nullptr));
        epoch = s.epochs;
        break;
      }
    }
  }
  OK(dp_group_set_training(group, 0));
  int64_t rows = 0;
  while (OK(dp_loader_next(eval_loader, in, tg, &rows)), rows > 0) {
    float loss = 0;
    int64_t correct = 0;
    OK(dp_group_evaluate(group, in, tg, &loss, &correct));
    res.eval_loss += loss;
    res.correct += correct;
  }
  int64_t n = 0;
  OK(dp_model_num_parameters(model, &n));
  res.params.resize(static_cast<size_t>(n));
  OK(dp_model_copy_parameters(model, res.params.data(), n));
  OK(dp_model_num_buffers(model, &n));
  res.buffers.resize(static_cast<size_t>(n));
  OK(dp_model_copy_buffers(model, res.buffers.data(), n));
  dp_tensor_destroy(in);
  dp_tensor_destroy(tg);
  dp_loader_destroy(eval_loader);
  dp_loader_destroy(loader);
  dp_dataset_destroy(ds);
  dp_optimizer_destroy(opt);
  dp_group_destroy(group);
  dp_process_group_destroy(pg);
  dp_model_destroy(model);
  dp_context_destroy(ctx);
  return res;
}

// Runs one process per entry of `devices` (rank order); every rank's result.
std::vector<Result> run_world(Setup s, const std::vector<std::string>& devices) {
  const int port = free_port();
  const int world = static_cast<int>(devices.size());
  std::vector<RankFn> ranks;
  for (int r = 0; r < world; ++r) {
    Setup mine = s;
    mine.devices = devices[static_cast<size_t>(r)];
    ranks.push_back([=] { return run(mine, r, world, port).bytes(); });
  }
  std::vector<Result> out;
  for (const Outcome& o : run_ranks(ranks, 120)) {
    INFO("rank " << out.size() << ": " << (o.status == 0 ? std::string("ok") : o.message));
    REQUIRE(o.status == 0);
    out.push_back(Result::from(o.message));
  }
  return out;
}

}  // namespace
