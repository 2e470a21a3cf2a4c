// dp — train, evaluate and benchmark JSON models on all local devices.
//
//   dp train MODEL.json --data fashion-mnist --devices auto --epochs 5
//   dp eval MODEL.json CKPT --data fashion-mnist
//   dp bench MODEL.json --devices cpu:0,cpu:1 --batch-size 256 --steps 50
//   dp export MODEL.json CKPT --onnx model.onnx   (the model and weights for ONNX runtimes)
//   dp export MODEL.json CKPT --safetensors w.st  (the weights alone, for PyTorch's load_state_dict)
//   dp devices
//   dp plugins ./swish.so rms_norm     (loads plugins and lists what they register)
//   --plugin PATH (repeatable) on train, eval, bench and export loads a plugin first
//
// Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input (the
// reason on stderr), 130 stopped by Ctrl-C and 143 by SIGTERM (after the
// current step, with a checkpoint when --save is given).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "plot.h"

namespace dpcli {

struct TrainOptions {
  std::string model, data = "fashion-mnist", devices = "auto", optimizer = R"({"type": "sgd", "lr": 0.05, "momentum": 0.9})";
  std::string save, resume, log, plot, lr_schedule = "constant", save_best, best_metric = "test_accuracy";
  int64_t epochs = 1, batch_size = 64, seed = 0, workers = 2, threads = 1, max_steps = 0;
  int64_t accumulate = 1, eval_every = 0;
  double clip_grad_norm = 0;
  std::string grad_scaler;  // the grad scaler's JSON; "": off
};

// --plugin PATH, repeatable: loaded into each command's context first.
static std::vector<std::string> g_plugins;
static bool g_cudnn_benchmark = false;
static bool g_allow_tf32 = false;           // --allow-tf32
static std::string g_precision = "fp32";    // --precision
static bool g_allow_model_plugins = false;  // --allow-model-plugins
static int64_t g_memory_limit = 0;          // --memory-limit
// `named`: how errors name each path ("--plugin ./x.so", or dp plugins' "plugin ./x.so").
static void load_plugins(dp_context* ctx, const std::vector<std::string>& paths, const char* named = "--plugin") {
  check(dp_context_set_option(ctx, DP_CONTEXT_ALLOW_MODEL_PLUGINS, g_allow_model_plugins ? 1 : 0), "--allow-model-plugins");
  check(dp_context_set_option(ctx, DP_CONTEXT_MEMORY_LIMIT, g_memory_limit), "--memory-limit");
  for (const auto& p : paths) check(dp_context_load_plugin(ctx, p.c_str()), named);  // libdp's message names p
}

// The signal that asked to stop (SIGINT, SIGTERM), or 0. An atomic, not a
// volatile sig_atomic_t: the handler may run on any thread (Open MPI's PMIx
// thread leaves the signals unblocked), and a lock-free atomic is both
// async-signal-safe and free of a data race across threads (TSan found one).
static std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free, "g_stop is written in a signal handler");
static int g_rank = -1;  // in a process group: this process's rank (errors name it)
// The first Ctrl-C (or SIGTERM: a batch system's preemption, Kubernetes'
// pod deletion) stops after the current step, with a checkpoint (in a
// process group: every process after the same step,
// dp_process_group_request_stop); a second one of the same kind ends the
// process at once, as the default action would. The other kind does not:
// launchers pass a terminal's Ctrl-C on and then send SIGTERM themselves
// (torchrun within milliseconds), which must not cost the checkpoint.
static void on_stop_signal(int sig) {
  int none = 0;
  if (!g_stop.compare_exchange_strong(none, sig)) {
    if (none != sig) return;  // already stopping, for the other kind
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  static const char msg_int[] = "\ndp: Ctrl-C: stopping after this step (Ctrl-C again to quit at once)\n";
  static const char msg_term[] = "\ndp: SIGTERM: stopping after this step (a second one quits at once)\n";
  const bool term = sig == SIGTERM;
  if (::write(2, term ? msg_term : msg_int, (term ? sizeof msg_term : sizeof msg_int) - 1) < 0) return;  // async-signal-safe
}

// An output file that cannot be written is refused before training, not
// when the run first writes it (an epoch, or the whole run, later).
// Atomic writers (checkpoints, weights, ONNX) make a temporary file beside
// it and rename it: they need the directory; --plot writes the file itself.
// As libdp's writer (io/whole_file.h): a symbolic link stands for the file it
// leads to (a link to nothing is refused), and a file that is not a regular
// one (/dev/null, a FIFO) is written in place, so it must be writable.
enum class Writer { kAtomic, kInPlace };
static void check_writable(const std::string& path, const std::string& option, Writer how = Writer::kAtomic) {
  if (path.empty()) return;
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) throw Failure(kUsage, option + ": " + path + " is a directory; give a file name");
  std::string file = path;  // what is written
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) == 0 && (S_ISLNK(lst.st_mode) || !S_ISREG(lst.st_mode))) {
    if (!exists) throw Failure(kUsage, option + ": " + path + " is a symbolic link to a file that does not exist");
    if (!S_ISREG(st.st_mode)) {  // a device or FIFO, written in place
      if (::access(path.c_str(), W_OK) != 0) throw Failure(kUsage, option + ": cannot write " + path + ": not writable");
      return;
    }
    char* real = ::realpath(path.c_str(), nullptr);
    if (!real) throw Failure(kUsage, option + ": cannot follow " + path + ": " + std::strerror(errno));
    file = real;
    std::free(real);
  }
  const std::string shown = file == path ? path : path + " (a link to " + file + ")";
  const size_t slash = file.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : file.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Failure(kUsage, option + ": cannot write " + shown + ": the directory " + dir + " does not exist");
  if (how == Writer::kInPlace && exists) {
    if (::access(file.c_str(), W_OK) != 0) throw Failure(kUsage, option + ": cannot write " + shown + ": not writable");
  } else if (::access(dir.c_str(), W_OK) != 0) {
    throw Failure(kUsage, option + ": cannot write " + shown + ": the directory " + dir + " is not writable");
  }
}

// Before training: an empty set, or samples the model cannot take, would
// otherwise be found by the first evaluation, an epoch (and its work) later,
// or end a run that trained nothing as a success.
static void check_sets(const dp_model* model, const Data& data, const std::string& spec) {
  int mdim = 0;
  int64_t mshape[DP_MAX_DIMS];
  check(dp_model_input_shape(model, &mdim, mshape), "model");
  auto text = [](int n, const int64_t* d) {
    std::string t = "[";
    for (int i = 0; i < n; ++i) t += (i ? ", " : "") + std::to_string(d[i]);
    return t + "]";
  };
  for (const auto& [set, name] : {std::pair<dp_dataset*, const char*>{data.train.get(), "training"}, {data.test.get(), "test"}}) {
    int64_t n = 0;
    int ndim = 0;
    int64_t shape[DP_MAX_DIMS];
    check(dp_dataset_length(set, &n), std::string(name) + " data");
    if (n == 0) throw Failure(kUsage, "--data " + spec + ": the " + name + " set is empty");
    check(dp_dataset_sample_shape(set, &ndim, shape), std::string(name) + " data");
    if (text(ndim, shape) != text(mdim, mshape))
      throw Failure(kUsage, "--data " + spec + ": the " + name + " set's samples are " + text(ndim, shape) +
                                " (after its transform); the model's input is " + text(mdim, mshape));
  }
}

static Model load_model(dp_context* ctx, const std::string& path) {
  dp_model* m = nullptr;
  check(dp_model_from_file(ctx, path.c_str(), &m), "model");
  return Model(m);
}

// Whether the model file's loss sums over its batch (reduction "sum"; the
// model built from it already, so the file reads).
static bool loss_sums(const std::string& path) {
  std::ifstream f(path);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (!j.is_object() || !j.contains("loss") || !j["loss"].is_object()) return false;
  const auto r = j["loss"].find("reduction");
  return r != j["loss"].end() && *r == "sum";
}

static Group make_group(dp_model* m, const std::string& devices, int64_t threads, dp_process_group* pg = nullptr) {
  dp_group* g = nullptr;
  const std::string what = "the group on --devices " + devices;
  if (pg)
    check(dp_group_create_distributed(m, devices.c_str(), pg, &g), what);
  else
    check(dp_group_create(m, resolve_devices(devices).c_str(), &g), what);
  Group group(g);
  check(dp_group_set_option(g, DP_GROUP_THREADS_PER_DEVICE, threads), "--threads");
  check(dp_group_set_option(g, DP_GROUP_CUDNN_BENCHMARK, g_cudnn_benchmark ? 1 : 0), "--cudnn-benchmark");
  check(dp_group_set_option(g, DP_GROUP_ALLOW_TF32, g_allow_tf32 ? 1 : 0), "--allow-tf32");
  const int precision = g_precision == "bf16" ? DP_PRECISION_BF16 : g_precision == "fp16" ? DP_PRECISION_FP16 : DP_PRECISION_FP32;
  check(dp_group_set_option(g, DP_GROUP_PRECISION, precision), "--precision " + g_precision);
  return group;
}

// On GPUs, batches come in page-locked memory (pin_memory, as PyTorch's loaders do for CUDA).
static bool on_gpus(const std::string& devices) { return resolve_devices(devices).compare(0, 4, "cuda") == 0; }

static Loader make_loader(dp_dataset* ds, int64_t batch, bool shuffle, int64_t workers, int64_t seed, bool pin) {
  std::string cfg = "{\"batch_size\": " + std::to_string(batch) + ", \"shuffle\": " + (shuffle ? "true" : "false") +
                    ", \"num_workers\": " + std::to_string(workers) + ", \"seed\": " + std::to_string(seed) +
                    ", \"pin_memory\": " + (pin ? "true" : "false") + "}";
  dp_loader* l = nullptr;
  check(dp_loader_create(ds, cfg.c_str(), &l), "loader");
  return Loader(l);
}

static Tensor empty_tensor(dp_context* ctx, dp_dtype dtype) {
  dp_tensor* t = nullptr;
  int64_t shape[1] = {0};
  check(dp_tensor_create(ctx, dtype, 1, shape, &t), "tensor");
  return Tensor(t);
}

struct EvalResult {
  double loss = 0, accuracy = 0;
};

// Mean loss and accuracy over a whole dataset, in evaluation mode.
static EvalResult evaluate(dp_context* ctx, dp_group* g, dp_loader* loader) {
  check(dp_group_set_training(g, 0), "eval");
  Tensor x = empty_tensor(ctx, DP_F32), y = empty_tensor(ctx, DP_I64);
  double loss_sum = 0;
  int64_t correct = 0, seen = 0, rows = 0;
  for (;;) {
    check(dp_loader_next(loader, x.get(), y.get(), &rows), "test data");
    if (rows == 0) break;
    float loss = 0;
    int64_t hits = 0;
    check(dp_group_evaluate(g, x.get(), y.get(), &loss, &hits), "evaluate");
    loss_sum += double(loss) * rows;
    correct += hits;
    seen += rows;
  }
  check(dp_group_set_training(g, 1), "train");
  EvalResult r;
  if (seen) r.loss = loss_sum / seen, r.accuracy = double(correct) / seen;
  return r;
}

// A number for people (progress lines): nan, inf as such.
static std::string text_num(double v) {
  if (std::isnan(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// A number for the JSON dp prints (the last stdout line, --log): null when it
// is not finite (printf's "-nan" is no JSON any reader takes).
static std::string json_num(double v) { return std::isfinite(v) ? text_num(v) : "null"; }

// What a checkpoint records besides the state: the command's settings and how
// its inputs were prepared (the dataset, its pixels' scaling, the transforms
// with normalisation and augmentation), so that `dp eval` and any reader
// (dp_checkpoint_metadata) prepare test inputs the same way.
static nlohmann::json run_record(const TrainOptions& o, const Data& data, const std::string& devices, int world) {
  nlohmann::json optimizer;
  try {
    optimizer = nlohmann::json::parse(o.optimizer);
  } catch (const nlohmann::json::exception&) {
    optimizer = o.optimizer;  // libdp took it, so this does not happen; keep the text
  }
  return {{"data", o.data},
          {"seed", o.seed},
          {"inputs",
           {{"dataset", data.name},
            {"pixels", data.pixels},
            {"train_transform", nlohmann::json::parse(data.train_transform)},
            {"test_transform", nlohmann::json::parse(data.test_transform)}}},
          {"training",
           {{"batch_size", o.batch_size},
            {"accumulate", o.accumulate},
            {"epochs", o.epochs},
            {"optimizer", optimizer},
            {"lr_schedule", o.lr_schedule},
            {"clip_grad_norm", o.clip_grad_norm},
            {"precision", g_precision},
            {"allow_tf32", g_allow_tf32},
            {"grad_scaler", o.grad_scaler.empty() ? nlohmann::json() : nlohmann::json::parse(o.grad_scaler, nullptr, false, true)},
            {"devices", devices},
            {"processes", world}}}};
}

// A checkpoint's (any safetensors file's) __metadata__ as a JSON object;
// check() reports a file that cannot be read, under `what`.
static nlohmann::json checkpoint_metadata(const std::string& path, const std::string& what) {
  char* text = nullptr;
  check(dp_checkpoint_metadata(path.c_str(), &text), what);
  const nlohmann::json meta = nlohmann::json::parse(text, nullptr, false);
  dp_free(text);
  return meta.is_object() ? meta : nlohmann::json::object();
}

// An entry of __metadata__ (whose values are strings): the JSON it holds
// (dp's records, a number), the string itself where it is not JSON text, or
// null where it is absent.
static nlohmann::json meta_value(const nlohmann::json& meta, const char* key) {
  if (!meta.contains(key) || !meta[key].is_string()) return nullptr;
  const nlohmann::json v = nlohmann::json::parse(meta[key].get<std::string>(), nullptr, false);
  return v.is_discarded() ? meta[key] : v;
}

// A run resumed with settings other than its checkpoint's goes on with the
// new ones, as a PyTorch script given new arguments would; it says which
// changed, since some change the run's course (the cosine schedule spans
// --epochs, the batch size moves the steps). More epochs under a schedule
// that does not depend on them is the usual way to train longer: no note.
static void note_changed_settings(const nlohmann::json& meta, const nlohmann::json& now) {
  nlohmann::json was = meta_value(meta, "training");
  if (!was.is_object()) return;
  for (const char* key : {"data", "seed"})  // the data and the seed (its shuffle) too
    if (meta.contains(key)) was[key] = meta_value(meta, key);
  const bool cosine = now.value("lr_schedule", std::string()) == "cosine";
  std::string changed;
  for (const auto& [key, value] : now.items()) {
    if (key == "devices" || key == "processes" || (key == "epochs" && !cosine)) continue;  // resuming elsewhere is fine
    if (!was.contains(key) || was[key] == value) continue;
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    changed += (changed.empty() ? "" : ", ") + flag + " " + was[key].dump() + " -> " + value.dump();
  }
  // Batch norm normalises over each device's share of a batch (as under
  // nn.DataParallel): another device count changes its statistics, and so the run.
  const nlohmann::json model = meta.contains("model") ? meta_value(meta, "model") : nlohmann::json();
  bool batch_norm = false;
  if (model.is_object() && model.contains("layers") && model["layers"].is_array())
    for (const auto& l : model["layers"])
      batch_norm = batch_norm || (l.is_object() && l.value("type", std::string()).rfind("batch_norm", 0) == 0);
  auto count = [](const nlohmann::json& t) -> int64_t {  // devices of all processes (rank 0's list times the processes)
    if (!t.contains("devices") || !t["devices"].is_string()) return -1;
    const std::string d = t["devices"].get<std::string>();
    const int64_t per = 1 + std::count(d.begin(), d.end(), ',');
    return per * (t.contains("processes") && t["processes"].is_number_integer() ? t["processes"].get<int64_t>() : 1);
  };
  if (batch_norm && count(was) > 0 && count(now) > 0 && count(was) != count(now))
    changed += (changed.empty() ? "" : ", ") + std::string("devices ") + std::to_string(count(was)) + " -> " +
               std::to_string(count(now)) + " (batch norm's statistics are each device's: the run changes)";
  if (changed.empty()) return;
  std::fprintf(stderr, "dp: note: resumed with other settings than the checkpoint's: %s%s\n", changed.c_str(),
               cosine && was.contains("epochs") && was["epochs"] != now["epochs"]
                   ? " (the cosine schedule now spans the new --epochs: its learning rate jumps)"
                   : "");
}

// The run's record so far (the chart's data), kept in each checkpoint's
// metadata as "history", so that --plot after --resume draws the whole run,
// not only its resumed part. Non-finite losses are stored as null.
static nlohmann::json history_json(const TrainingRecord& r) {
  nlohmann::json steps = nlohmann::json::array(), evals = nlohmann::json::array(), epochs = nlohmann::json::array();
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  // At most ~100k steps' losses (every k-th beyond that, the last always):
  // a few MB of header at most, far below safetensors' 100 MB limit.
  const size_t n = r.step_losses.size(), stride = (n + 99999) / 100000;
  for (size_t i = 0; i < n; ++i)
    if (i % std::max<size_t>(stride, 1) == 0 || i + 1 == n)
      steps.push_back({r.step_losses[i].first, num(r.step_losses[i].second)});
  for (const EvalPoint& e : r.evals) evals.push_back({e.step, num(e.test_loss), num(e.test_accuracy)});
  for (const EpochPoint& e : r.epochs)
    epochs.push_back({e.epoch, e.step, num(e.train_loss), num(e.test_loss), num(e.test_accuracy)});
  return {{"step_losses", steps}, {"evals", evals}, {"epochs", epochs}};
}

// A resumed run's chart starts with the checkpoint's history up to its step
// (a --save-best checkpoint may lie behind the run that wrote it); a
// checkpoint without one (or not readable as one) starts it empty.
static void restore_history(const nlohmann::json& meta, int64_t upto, TrainingRecord* r) {
  const nlohmann::json h = meta_value(meta, "history");
  auto num = [](const nlohmann::json& v) { return v.is_number() ? v.get<double>() : NAN; };
  try {
    TrainingRecord got;
    for (const auto& e : h.at("step_losses"))
      if (e.at(0).get<int64_t>() <= upto) got.step_losses.emplace_back(e.at(0).get<int64_t>(), num(e.at(1)));
    for (const auto& e : h.at("evals"))
      if (e.at(0).get<int64_t>() <= upto) got.evals.push_back({e.at(0).get<int64_t>(), num(e.at(1)), num(e.at(2))});
    for (const auto& e : h.at("epochs"))
      if (e.at(1).get<int64_t>() <= upto)
        got.epochs.push_back({e.at(0).get<int64_t>(), e.at(1).get<int64_t>(), num(e.at(2)), num(e.at(3)), num(e.at(4))});
    r->step_losses = std::move(got.step_losses);
    r->evals = std::move(got.evals);
    r->epochs = std::move(got.epochs);
  } catch (const nlohmann::json::exception&) {  // not dp's history: the chart starts empty
  }
}

// One line for the chart's caption: model, data, devices, batch, optimizer, epochs.
static std::string caption(const TrainOptions& o, const Data& data, int global_devices, int world) {
  std::string opt = "optimizer";
  try {
    const auto j = nlohmann::json::parse(o.optimizer);
    opt = j.value("type", std::string("sgd")) + " lr " + text_num(j.value("lr", 0.0));
  } catch (const nlohmann::json::exception&) {
  }
  const size_t slash = o.model.find_last_of('/');
  std::string c = (slash == std::string::npos ? o.model : o.model.substr(slash + 1)) + " \u00b7 " + data.name + " \u00b7 " +
                  std::to_string(global_devices) + " device" + (global_devices == 1 ? "" : "s") +
                  (world > 1 ? " in " + std::to_string(world) + " processes" : "") + " \u00b7 batch " +
                  std::to_string(o.batch_size) + (o.accumulate > 1 ? " x " + std::to_string(o.accumulate) + " accumulated" : "") +
                  " \u00b7 " + opt;
  if (o.lr_schedule != "constant") c += " (" + (o.lr_schedule.size() > 40 ? std::string("scheduled") : o.lr_schedule) + ")";
  if (o.clip_grad_norm > 0) c += " \u00b7 clip " + text_num(o.clip_grad_norm);
  if (!o.grad_scaler.empty()) c += " \u00b7 grad scaler";
  return c + " \u00b7 " + std::to_string(o.epochs) + " epoch" + (o.epochs == 1 ? "" : "s");
}

// --lr-schedule as a schedule's JSON (null: constant): "cosine" or any
// type alone ("linear": its defaults; libdp names a key a type cannot do
// without), or the JSON object; read before the
// data loads, so that broken JSON fails at once (an unknown type or key is
// libdp's to refuse, once the optimizer exists).
static nlohmann::json lr_schedule_json(const std::string& text) {
  if (text == "constant") return nullptr;
  if (text.find_first_of("{[\"") == std::string::npos) return {{"type", text}};
  nlohmann::json j;
  std::string why = "not an object";
  try {
    j = nlohmann::json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::exception& e) {
    why = e.what();
  }
  if (!j.is_object())
    throw Failure(kUsage, "--lr-schedule: expected constant, cosine, a schedule's type (linear, step, exponential, multistep, "
                          "cosine_warmup, onecycle) or its JSON object, got '" + text + "' (" + why + ")");
  return j;
}

// The run's length where a schedule needs it and the user left it out (as
// "cosine" alone always did): cosine's T_max, onecycle's and
// cosine_warmup's total_steps are all the run's optimizer steps.
static void fill_schedule_length(nlohmann::json& schedule, int64_t total_steps) {
  const auto type = schedule.find("type");
  if (type == schedule.end() || !type->is_string()) return;  // libdp says what is wrong
  if (*type == "cosine" && !schedule.contains("T_max")) schedule["T_max"] = total_steps;
  if ((*type == "onecycle" || *type == "cosine_warmup") && !schedule.contains("total_steps"))
    schedule["total_steps"] = total_steps;
}

static int train(const TrainOptions& o) {
  // Installed first: a Ctrl-C while the data loads must still stop cleanly.
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  // A launcher that exits on Ctrl-C (mpirun) closes the pipes of our stderr:
  // a write there then fails (EPIPE) instead of killing the process before
  // its checkpoint.
  std::signal(SIGPIPE, SIG_IGN);
  nlohmann::json schedule = lr_schedule_json(o.lr_schedule);
  // Under torchrun, mpirun or srun: one group over every process's devices,
  // each process reading its own rows of each batch; rank 0 reports and
  // writes the checkpoints and files. Joined first, so that a process that
  // fails on its own input (a data folder or model missing on its machine)
  // leaves the group, and the others learn it at once instead of after
  // DP_COMM_TIMEOUT.
  const Launch launch = join_if_launched();
  const int rank = launch.rank, world = launch.world;
  dp_process_group* pg = launch.pg.get();
  if (pg) g_rank = rank;
  const bool lead = rank == 0;
  // The checkpoint's record, read by every process (after joining: one that
  // cannot read it leaves, and the others learn it at once), so that all of
  // a group decide alike below.
  const nlohmann::json resumed = o.resume.empty() ? nlohmann::json() : checkpoint_metadata(o.resume, "--resume");
  if (pg) {  // what each process reads from its own flags and libdp does not compare
    const nlohmann::json mine = {{"--epochs", o.epochs},          {"--max-steps", o.max_steps},
                                 {"--save (given)", !o.save.empty()}, {"--save-best (given)", !o.save_best.empty()},
                                 {"--best-metric", o.best_metric}, {"--resume (its step)", o.resume.empty() ? nlohmann::json(false) : meta_value(resumed, "step")}};
    for (const auto& [flag, value] : mine.items())  // (--eval-every, --accumulate: libdp refuses the first differing call)
      check(dp_process_group_check_same(pg, ("dp train " + flag).c_str(), value.dump().c_str()), "process group");
  }
  dp_context* c = nullptr;
  check(dp_context_create(&c), "context");
  load_plugins(c, g_plugins);
  Context ctx(c);
  Model model = load_model(c, o.model);
  Data data = open_data(c, o.data, model.get(), static_cast<uint64_t>(o.seed));
  check_sets(model.get(), data, o.data);
  if (lead) {  // rank 0 writes them
    check_writable(o.save, "--save");
    check_writable(o.save_best, "--save-best");
    check_writable(o.plot, "--plot", Writer::kInPlace);
    check_writable(o.log, "--log", Writer::kInPlace);
  }
  std::string devices = resolve_devices(o.devices, launch.local_processes, launch.local_rank);
  Group group = make_group(model.get(), devices, o.threads, pg);
  dp_optimizer* op = nullptr;
  check(dp_optimizer_create(group.get(), o.optimizer.c_str(), &op), "--optimizer");
  Optimizer opt(op);
  if (o.clip_grad_norm > 0) check(dp_optimizer_set_clip_grad_norm(opt.get(), o.clip_grad_norm), "--clip-grad-norm");
  // Before --resume, which restores its state.
  if (!o.grad_scaler.empty()) check(dp_optimizer_set_grad_scaler(opt.get(), o.grad_scaler.c_str()), "--grad-scaler");
  Loader train_loader = make_loader(data.train.get(), o.batch_size, true, o.workers, o.seed, on_gpus(devices));
  Loader test_loader = make_loader(data.test.get(), 1000, false, o.workers, o.seed, on_gpus(devices));
  if (pg) {
    check(dp_loader_shard(train_loader.get(), group.get()), "training data");
    check(dp_loader_shard(test_loader.get(), group.get()), "test data");
  }
  const nlohmann::json part = resumed.is_null() ? nlohmann::json() : meta_value(resumed, "epoch_loss");
  if (part.is_object()) {  // saved inside an epoch: its position counts batches of the batch size it ran with
    const nlohmann::json was = meta_value(resumed, "training");
    if (was.is_object() && was.contains("batch_size") && was["batch_size"] != o.batch_size)
      throw Failure(kUsage, "--resume: " + o.resume + " was saved before its epoch ended (step " +
                                part.value("step", nlohmann::json()).dump() + ") with --batch-size " +
                                was["batch_size"].dump() + "; resume it with --batch-size " + was["batch_size"].dump() +
                                " (a checkpoint written after an epoch's evaluation may go on with another)");
  }
  if (!o.resume.empty()) check(dp_checkpoint_load(o.resume.c_str(), group.get(), opt.get(), train_loader.get()), "--resume");
  std::ofstream log;
  if (!o.log.empty() && lead) {
    log.open(o.log, std::ios::app);
    if (!log) throw Failure(kUsage, "--log: cannot write " + o.log + ": " + std::strerror(errno));
  }
  // A write that fails once training runs (a full disk) stops the log, not
  // the run: the run ends as it would, checkpoint and result included, then
  // exits 1 with this.
  std::string late_error;
  auto log_line = [&](const std::string& line) {
    if (!log.is_open()) return;
    log << line << std::endl;
    if (log) return;
    if (late_error.empty())
      late_error = "--log: cannot write " + o.log + " (" + std::strerror(errno) + "); it lacks the lines from then on";
    log.close();
  };
  int ndev = 0;
  check(dp_group_num_devices(group.get(), &ndev), "devices");
  int64_t batches = 0, epoch = 0, batch = 0, samples_in_set = 0;
  check(dp_loader_num_batches(train_loader.get(), &batches), "loader");
  check(dp_loader_position(train_loader.get(), &epoch, &batch), "loader");
  check(dp_dataset_length(data.train.get(), &samples_in_set), "training data");
  int global_devices = ndev, first_device = 0;
  check(dp_group_global_devices(group.get(), &global_devices, &first_device), "devices");
  if (lead)
    std::fprintf(stderr, "dp: training %s on %s over %d device(s) (%s%s), batch %lld%s, %lld batches per epoch\n",
                 o.model.c_str(), data.name.c_str(), global_devices,
                 world > 1 ? (std::to_string(world) + " processes; rank 0's: ").c_str() : "", devices.c_str(),
                 (long long)o.batch_size,
                 o.accumulate > 1 ? (", " + std::to_string(o.accumulate) + " accumulated per step").c_str() : "",
                 (long long)batches);

  // --accumulate K: each optimizer step takes K batches (the epoch's last
  // step what is left), each batch's loss scaled by its share of the step's
  // rows, so that the step is one of a batch of those rows (within
  // rounding); a loss of reduction "sum" adds the batches' sums unscaled,
  // for the same reason. The global rows of batch i follow from the set's size.
  const int64_t K = o.accumulate, steps_per_epoch = (batches + K - 1) / K;
  const bool sums = loss_sums(o.model);
  auto batch_rows = [&](int64_t i) { return std::min(o.batch_size, samples_in_set - i * o.batch_size); };
  auto step_rows = [&](int64_t i) {  // the rows of the step that batch i belongs to
    int64_t rows = 0;
    for (int64_t j = i / K * K; j < std::min(batches, (i / K + 1) * K); ++j) rows += batch_rows(j);
    return rows;
  };
  auto closes_step = [&](int64_t i) { return (i + 1) % K == 0 || i + 1 == batches; };
  // Optimizer steps taken (resumed: so far). A checkpoint records its own:
  // its earlier epochs may have run with another --batch-size (allowed after
  // an epoch's end), so epochs × this run's steps per epoch is not it.
  int64_t global_step = epoch * steps_per_epoch + (batch + K - 1) / K;
  if (const nlohmann::json saved = resumed.is_null() ? nlohmann::json() : meta_value(resumed, "step");
      saved.is_number_integer() && saved.get<int64_t>() >= 0)
    global_step = saved.get<int64_t>();
  // The epoch's training loss so far (its mean is the epoch's train_loss):
  // kept in a checkpoint saved inside an epoch, so that a run resumed there
  // reports the whole epoch's mean, not that of the steps after the resume.
  // A run stopped (--max-steps, Ctrl-C) after an epoch's last batch saves it
  // too, and the run resumed there ends that epoch first: its train loss,
  // evaluation, log line and checkpoint. Without it (an older checkpoint)
  // the resumed run goes on with the next epoch.
  const bool resumed_part = batch > 0 && part.is_object() && part.value("step", int64_t(-1)) == global_step;
  if (batch >= batches && !resumed_part) {  // an epoch that ended before the checkpoint: go on with the next one
    ++epoch;
    batch = 0;
    check(dp_loader_seek(train_loader.get(), epoch, batch), "loader");
  }
  if (!o.resume.empty() && epoch >= o.epochs && lead)
    std::fprintf(stderr, "dp: note: %s has trained %lld epoch(s) and --epochs (the run's total) is %lld: nothing to "
                 "train; give a larger --epochs to go on\n", o.resume.c_str(), (long long)epoch, (long long)o.epochs);

  const nlohmann::json record = run_record(o, data, devices, world);
  TrainingRecord chart;  // the run so far: drawn by --plot, kept in checkpoints
  double epoch_loss_sum = 0;
  int64_t epoch_loss_rows = 0;
  // The learning rate the last optimizer step used (--log's "lr"); a checkpoint saved inside an
  // epoch keeps it for the resumed run's first line, which may come before any step.
  double step_lr = 0;
  check(dp_optimizer_lr(opt.get(), &step_lr), "optimizer");
  if (resumed_part) {
    epoch_loss_sum = part.value("sum", 0.0);
    epoch_loss_rows = part.value("rows", int64_t(0));
    if (part.contains("lr") && part["lr"].is_number()) step_lr = part["lr"].get<double>();
  }
  if (!o.resume.empty() && lead) {
    nlohmann::json now = record["training"];
    now["data"] = record["data"];
    now["seed"] = record["seed"];
    note_changed_settings(resumed, now);
    restore_history(resumed, global_step, &chart);
  }
  // --save-best: the best evaluation so far, kept in checkpoints so that a
  // resumed run does not replace the best one with a worse one.
  const bool higher_is_better = o.best_metric == "test_accuracy";
  double best = higher_is_better ? -INFINITY : INFINITY;
  int64_t best_step = -1;
  if (const nlohmann::json b = resumed.is_null() ? nlohmann::json() : meta_value(resumed, "best_so_far");
      b.is_object() && b.value("metric", std::string()) == o.best_metric && b.contains("value") && b["value"].is_number()) {
    best = b["value"].get<double>();
    best_step = b.value("step", int64_t(-1));
  }
  auto save_to = [&](const std::string& path, const char* option, const nlohmann::json& extra) {
    nlohmann::json meta = record;
    meta["step"] = global_step;
    meta["history"] = history_json(chart);
    if (best_step >= 0) meta["best_so_far"] = {{"metric", o.best_metric}, {"value", best}, {"step", best_step}};
    if (batch > 0)  // inside an epoch, or after its last batch before its end (--max-steps, Ctrl-C)
      meta["epoch_loss"] = {{"sum", epoch_loss_sum}, {"rows", epoch_loss_rows}, {"step", global_step}, {"lr", step_lr}};
    if (extra.is_object()) meta.update(extra);
    check_write(dp_checkpoint_save(path.c_str(), group.get(), opt.get(), train_loader.get(), meta.dump().c_str()), option);
  };
  auto save = [&] {
    if (!o.save.empty()) save_to(o.save, "--save", {});
  };

  // --lr-schedule: "cosine" is torch's CosineAnnealingLR over all steps
  // (eta_min 0); any schedule of dp_optimizer_set_lr_schedule, its length
  // the run's where left out. A function of the optimizer's steps, so a
  // resumed run follows the same curve.
  // The run's optimizer steps: those before this epoch (as they ran), and
  // this run's for the rest.
  if (batches > 0 && o.epochs - epoch > (INT64_MAX / 4) / batches)  // (the schedule's length and the ETA would wrap)
    throw Failure(kUsage, "--epochs " + std::to_string(o.epochs) + " at " + std::to_string(batches) +
                              " batches each is more than can be counted");
  const int64_t total_steps = global_step - (batch + K - 1) / K + (o.epochs - epoch) * steps_per_epoch;
  if (schedule.is_object()) {
    fill_schedule_length(schedule, std::max<int64_t>(1, total_steps));
    check(dp_optimizer_set_lr_schedule(opt.get(), schedule.dump().c_str()), "--lr-schedule");
  }

  Progress progress;
  // Evaluations (each epoch's end, and every --eval-every steps): logged,
  // and with --save-best the best one by --best-metric keeps a checkpoint.
  auto evaluated = [&](const EvalResult& r, double epoch_at) {
    if (o.save_best.empty()) return;
    const double v = higher_is_better ? r.accuracy : r.loss;
    if (!std::isfinite(v)) {
      if (lead)
        progress.line("dp: --save-best: the " + o.best_metric + " at step " + std::to_string(global_step) +
                      " is not a number (the outputs overflow: a learning rate too high?): not a best");
      return;
    }
    if (!(higher_is_better ? v > best : v < best)) return;
    best = v;
    best_step = global_step;
    save_to(o.save_best, "--save-best", {{"best", {{"metric", o.best_metric}, {"value", v}, {"step", global_step}, {"epoch", epoch_at}}}});
    if (lead)
      progress.line("dp: best " + o.best_metric + " so far, " + text_num(v) + " at step " + std::to_string(global_step) +
                    ": checkpoint written to " + o.save_best);
  };

  Tensor x = empty_tensor(c, DP_F32), y = empty_tensor(c, DP_I64);
  chart.steps_per_epoch = steps_per_epoch;
  if (lead) {  // every step's loss is kept: room for this run's, so the loop does not grow it
    int64_t left = std::max<int64_t>(0, total_steps - global_step);
    if (o.max_steps > 0) left = std::min(left, o.max_steps);
    chart.step_losses.reserve(chart.step_losses.size() + static_cast<size_t>(left));
  }
  chart.caption = caption(o, data, global_devices, world);
  if (!o.resume.empty()) chart.caption += " \u00b7 resumed at step " + std::to_string(global_step);
  double train_seconds = 0, start = now_seconds(), last_loss = 0;
  const int64_t first_epoch = epoch;  // this run's: last_loss and last_eval are set once one ends
  int64_t samples = 0, epochs_done = epoch;
  EvalResult last_eval;
  bool interrupted = false, step_limit = false, saved_at_stop = false;
  int64_t steps_run = 0;
  // Ctrl-C: alone, stop after this step; in a process group, ask the others,
  // and stop when they have all learnt of it (after the same step on every
  // process: one stopping alone would leave the others in its next step).
  int stopping = 0;  // in a process group: the processes that asked
  auto stop_now = [&] {
    if (!pg) return g_stop != 0;
    if (g_stop) check(dp_process_group_request_stop(pg), "process group");
    check(dp_process_group_stop_requested(pg, &stopping), "process group");
    return stopping > 0;
  };
  for (; epoch < o.epochs && !interrupted && !step_limit; ++epoch) {
    double epoch_start = now_seconds(), step_loss = 0;
    int64_t rows = 0;
    if (batch == 0) epoch_loss_sum = 0, epoch_loss_rows = 0;  // (a resumed epoch keeps its part)
    for (;;) {
      double t0 = now_seconds();
      check(dp_loader_next(train_loader.get(), x.get(), y.get(), &rows), "training data");
      if (rows == 0) break;
      float loss = 0;
      const int64_t i = batch;  // this batch's index in the epoch
      if (K == 1) {
        check(dp_group_train_step(group.get(), opt.get(), x.get(), y.get(), &loss), "train step");
        check(dp_optimizer_lr(opt.get(), &step_lr), "optimizer");
        step_loss = loss;
      } else {
        const double share = sums ? 1.0 : double(batch_rows(i)) / double(step_rows(i));
        double scale = 1;  // the grad scaler's: its loss gradients are scaled by the caller (scaler.scale(loss))
        check(dp_optimizer_grad_scaler_state(opt.get(), &scale, nullptr, nullptr), "--grad-scaler");
        check(dp_group_forward_backward(group.get(), x.get(), y.get(), share * scale, &loss), "train step");
        step_loss += share * loss;
        if (closes_step(i)) {
          check(dp_optimizer_step(opt.get()), "optimizer step");
          check(dp_optimizer_lr(opt.get(), &step_lr), "optimizer");
          check(dp_group_zero_grad(group.get()), "zero_grad");
        }
      }
      train_seconds += now_seconds() - t0;
      samples += rows;
      epoch_loss_rows += rows;
      epoch_loss_sum += double(loss) * rows;
      ++batch;
      double sps = samples / std::max(train_seconds, 1e-9);
      double left = double((o.epochs - epoch) * batches - batch) * o.batch_size / sps;
      if (lead)  // (the optimizer step this batch belongs to)
        progress.step(epoch, o.epochs, batch, batches, o.accumulate, global_step + 1, loss, sps, left);
      if (!closes_step(i)) continue;  // the next batches of this step first
      ++global_step;
      if (lead) chart.step_losses.emplace_back(global_step, step_loss);
      step_loss = 0;
      if (o.eval_every > 0 && global_step % o.eval_every == 0 && batch < batches) {  // (an epoch's end evaluates below)
        const EvalResult r = evaluate(c, group.get(), test_loader.get());
        const double at = epoch + double(batch) / double(batches);
        if (lead)
          progress.line("step " + std::to_string(global_step) + " (epoch " + text_num(at) + "): test loss " +
                        text_num(r.loss) + ", test accuracy " + text_num(r.accuracy));
        log_line("{\"step\": " + std::to_string(global_step) + ", \"epoch\": " + json_num(at) + ", \"test_loss\": " +
                 json_num(r.loss) + ", \"test_accuracy\": " + json_num(r.accuracy) + ", \"lr\": " +
                 nlohmann::json(step_lr).dump() + "}");
        if (lead) chart.evals.push_back({global_step, r.loss, r.accuracy});
        evaluated(r, at);
      }
      if (stop_now()) {
        interrupted = true;
        break;
      }
      if (o.max_steps > 0 && ++steps_run >= o.max_steps) {  // a benchmark's run: stop without evaluating
        step_limit = true;
        break;
      }
    }
    if (interrupted || step_limit) break;
    batch = 0;
    last_loss = epoch_loss_rows ? epoch_loss_sum / double(epoch_loss_rows) : 0;
    last_eval = evaluate(c, group.get(), test_loader.get());
    chart.epochs.push_back({epoch + 1, global_step, last_loss, last_eval.loss, last_eval.accuracy});
    epochs_done = epoch + 1;
    if (lead)
      progress.line("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(o.epochs) + ": train loss " +
                  text_num(last_loss) + ", test loss " + text_num(last_eval.loss) + ", test accuracy " +
                  text_num(last_eval.accuracy) + " (" + text_num(now_seconds() - epoch_start) + " s)");
    log_line("{\"epoch\": " + std::to_string(epoch + 1) + ", \"step\": " + std::to_string(global_step) +
             ", \"train_loss\": " + json_num(last_loss) + ", \"test_loss\": " + json_num(last_eval.loss) +
             ", \"test_accuracy\": " + json_num(last_eval.accuracy) + ", \"samples_per_second\": " +
             (samples ? json_num(samples / std::max(train_seconds, 1e-9)) : "null") +  // (null: an epoch ended by a resumed run before any batch)
             ", \"lr\": " + nlohmann::json(step_lr).dump() + "}");
    evaluated(last_eval, double(epoch + 1));
    save();
    // Ctrl-C during the epoch's evaluation or save: stop here, at the epoch's
    // end (the checkpoint just written), not after the next epoch's first
    // step. (In a process group a request is agreed at the next collective:
    // one made during the save stops after the next step, on every process.)
    if (epoch + 1 < o.epochs && stop_now()) interrupted = saved_at_stop = true;
  }
  if ((interrupted || step_limit) && !saved_at_stop) save();
  if (interrupted || step_limit) {
    if (lead)
      progress.line(std::string(!interrupted          ? "dp: stopped after --max-steps"
                                : g_stop == SIGTERM ? "dp: stopped by SIGTERM"
                                : g_stop == SIGINT  ? "dp: stopped by Ctrl-C"
                                                    : "dp: stopped by Ctrl-C or SIGTERM") +  // (another process's)
                    (interrupted && pg ? " (on " + std::to_string(stopping) + " of " + std::to_string(world) + " processes)"
                                       : std::string()) +
                  (o.save.empty() ? "" : "; checkpoint written to " + o.save));
  }
  if (!o.plot.empty() && lead) {
    try {
      write_plot(o.plot, chart);
    } catch (const Failure& f) {  // the result is still printed
      if (late_error.empty()) late_error = f.what();
    }
  }
  const int stopped_code = g_stop == SIGTERM ? 128 + SIGTERM : 128 + SIGINT;  // as the shell reports a signal's end
  if (!lead) return interrupted ? stopped_code : kOk;
  std::string best_json;
  if (!o.save_best.empty() && best_step >= 0)
    best_json = ", \"best\": {\"metric\": \"" + o.best_metric + "\", \"value\": " + json_num(best) +
                ", \"step\": " + std::to_string(best_step) + "}";
  if (!o.grad_scaler.empty()) {  // the scale it ended with, and the steps it skipped (inf/NaN gradients)
    double scale = 1;
    int64_t skipped = 0;
    check(dp_optimizer_grad_scaler_state(opt.get(), &scale, nullptr, &skipped), "--grad-scaler");
    best_json += ", \"grad_scale\": " + nlohmann::json(scale).dump() + ", \"skipped_steps\": " + std::to_string(skipped);
  }
  // The last epoch's figures; null where no epoch ended in this run (--max-steps, Ctrl-C).
  auto epoch_num = [&](double v) { return epochs_done > first_epoch ? json_num(v) : std::string("null"); };
  std::printf("{\"test_accuracy\": %s, \"test_loss\": %s, \"train_loss\": %s, \"epochs\": %lld, \"steps\": %lld, "
              "\"samples_per_second\": %s, \"seconds\": %s, \"devices\": %d, \"processes\": %d, \"interrupted\": %s%s}\n",
              epoch_num(last_eval.accuracy).c_str(), epoch_num(last_eval.loss).c_str(), epoch_num(last_loss).c_str(),
              (long long)epochs_done, (long long)global_step, json_num(samples / std::max(train_seconds, 1e-9)).c_str(),
              json_num(now_seconds() - start).c_str(), global_devices, world, interrupted ? "true" : "false",
              best_json.c_str());
  if (!late_error.empty()) {
    if (!interrupted) throw Failure(kRuntime, late_error);
    std::fprintf(stderr, "dp: %s\n", late_error.c_str());  // the signal's exit status stays
  }
  return interrupted ? stopped_code : kOk;
}

static int eval(const std::string& model_path, const std::string& ckpt, const std::string& data_spec,
                const std::string& devices, int64_t batch_size, int64_t workers, const std::string& transform) {
  if (launched_rank() != 0) return kOk;  // under a launcher: rank 0 evaluates and prints
  dp_context* c = nullptr;
  check(dp_context_create(&c), "context");
  load_plugins(c, g_plugins);
  Context ctx(c);
  Model model = load_model(c, model_path);
  Group group = make_group(model.get(), devices, 1);
  // A training checkpoint or plain weights (a PyTorch state_dict, say).
  const nlohmann::json meta = checkpoint_metadata(ckpt, "checkpoint");
  const bool is_checkpoint = meta.value("format", std::string()) == "dp-checkpoint-1";
  if (is_checkpoint)
    check(dp_checkpoint_load(ckpt.c_str(), group.get(), nullptr, nullptr), "checkpoint");
  else
    check(dp_model_load_safetensors(model.get(), ckpt.c_str()), "weights");
  Data data = open_data(c, data_spec, model.get(), 0);
  // Test inputs prepared as the training run recorded (its normalisation),
  // unless --transform says otherwise; plain weights: --data's own.
  // (__metadata__'s values are strings: "inputs" holds the record's JSON.)
  const nlohmann::json recorded = meta_value(meta, "inputs");
  std::string use = transform;
  if (use.empty() && recorded.is_object() && recorded.contains("test_transform")) {
    use = recorded["test_transform"].dump();
    const std::string trained_on = recorded.value("dataset", data.name);
    if (trained_on != data.name)
      std::fprintf(stderr, "dp: note: the checkpoint was trained on %s, evaluated here on %s\n", trained_on.c_str(),
                   data.name.c_str());
    std::fprintf(stderr, "dp: test inputs prepared as the checkpoint records: %s\n", use.c_str());
  }
  if (!use.empty()) check(dp_dataset_set_transform(data.test.get(), use.c_str()), "--transform");
  Loader loader = make_loader(data.test.get(), batch_size, false, workers, 0, on_gpus(devices));
  double t0 = now_seconds();
  EvalResult r = evaluate(c, group.get(), loader.get());
  std::printf("{\"test_accuracy\": %s, \"test_loss\": %s, \"seconds\": %s}\n", json_num(r.accuracy).c_str(),
              json_num(r.loss).c_str(), json_num(now_seconds() - t0).c_str());
  return kOk;
}

// The model with a checkpoint's or weights file's weights as ONNX (evaluation
// form); the file's path and size as JSON on stdout.
static int export_model(const std::string& model_path, const std::string& weights, const std::string& onnx,
                        const std::string& safetensors) {
  if (onnx.empty() && safetensors.empty())
    throw Failure(kUsage, "export: give --onnx FILE, --safetensors FILE, or both");
  if (launched_rank() != 0) return kOk;  // under a launcher: rank 0 writes
  check_writable(onnx, "--onnx");
  check_writable(safetensors, "--safetensors");
  dp_context* c = nullptr;
  check(dp_context_create(&c), "context");
  load_plugins(c, g_plugins);
  Context ctx(c);
  Model model = load_model(c, model_path);
  check(dp_model_load_safetensors(model.get(), weights.c_str()), "weights");  // a checkpoint loads as weights
  auto size_of = [](const std::string& path) -> nlohmann::json {  // (null: a device or FIFO, written in place)
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return nullptr;
    return static_cast<int64_t>(st.st_size);
  };
  nlohmann::json out = nlohmann::json::object();
  if (!onnx.empty()) {
    check_write(dp_model_export_onnx(model.get(), onnx.c_str()), "--onnx");
    out["onnx"] = onnx;
    out["bytes"] = size_of(onnx);
  }
  if (!safetensors.empty()) {
    check_write(dp_model_save_weights(model.get(), safetensors.c_str()), "--safetensors");
    out["safetensors"] = safetensors;
    out["safetensors_bytes"] = size_of(safetensors);
  }
  std::printf("%s\n", out.dump().c_str());
  return kOk;
}

static int bench(const std::string& model_path, const std::string& devices, int64_t batch, int64_t steps,
                 int64_t threads, const std::string& optimizer) {
  dp_context* c = nullptr;
  check(dp_context_create(&c), "context");
  load_plugins(c, g_plugins);
  Context ctx(c);
  Model model = load_model(c, model_path);
  // Under a launcher, the group spans the processes (as in train).
  const Launch launch = join_if_launched();
  const int rank = launch.rank, world = launch.world;
  dp_process_group* pg = launch.pg.get();
  if (pg) g_rank = rank;
  Group group = make_group(model.get(), resolve_devices(devices, launch.local_processes, launch.local_rank), threads, pg);

  dp_optimizer* op = nullptr;
  check(dp_optimizer_create(group.get(), optimizer.c_str(), &op), "--optimizer");
  Optimizer opt(op);
  // One batch of synthetic samples (at least the 2 a synthetic set needs).
  Data data = open_data(c, "synthetic:" + std::to_string(std::max<int64_t>(batch, 2)), model.get(), 0,
                        "--batch-size " + std::to_string(batch));
  Loader loader = make_loader(data.train.get(), batch, false, 0, 0, on_gpus(devices));
  if (pg) check(dp_loader_shard(loader.get(), group.get()), "data");
  Tensor x = empty_tensor(c, DP_F32), y = empty_tensor(c, DP_I64);
  int64_t rows = 0;
  check(dp_loader_next(loader.get(), x.get(), y.get(), &rows), "data");
  float loss = 0;
  for (int i = 0; i < 3; ++i) check(dp_group_train_step(group.get(), opt.get(), x.get(), y.get(), &loss), "warm-up");
  double busy0 = 0, exposed0 = 0;
  check(dp_group_comm_seconds(group.get(), &busy0, &exposed0), "devices");
  double t0 = now_seconds();
  for (int64_t i = 0; i < steps; ++i) check(dp_group_train_step(group.get(), opt.get(), x.get(), y.get(), &loss), "step");
  double sec = now_seconds() - t0;
  int ndev = 0, first = 0;
  check(dp_group_global_devices(group.get(), &ndev, &first), "devices");
  // Communication between processes over the timed steps: time in
  // collectives, and the part the steps waited for.
  double busy = 0, exposed = 0;
  check(dp_group_comm_seconds(group.get(), &busy, &exposed), "devices");
  if (rank != 0) return kOk;
  std::printf("{\"samples_per_second\": %s, \"seconds\": %s, \"steps\": %lld, \"batch_size\": %lld, \"devices\": %d, "
              "\"processes\": %d, \"threads_per_device\": %lld, \"loss\": %s, \"comm_busy_fraction\": %s, "
              "\"comm_wait_fraction\": %s, \"precision\": \"%s\", \"allow_tf32\": %s, \"cudnn_benchmark\": %s}\n",
              json_num(batch * steps / sec).c_str(), json_num(sec).c_str(), (long long)steps, (long long)batch, ndev, world,
              (long long)threads, json_num(loss).c_str(), json_num((busy - busy0) / sec).c_str(),
              json_num((exposed - exposed0) / sec).c_str(), g_precision.c_str(), g_allow_tf32 ? "true" : "false",
              g_cudnn_benchmark ? "true" : "false");
  return kOk;
}

static int plugins(const std::vector<std::string>& paths) {
  dp_context* c = nullptr;
  check(dp_context_create(&c), "context");
  Context ctx(c);
  load_plugins(c, paths, "plugin");
  int n = 0;
  check(dp_context_num_plugins(c, &n), "plugins");
  if (n == 0) std::printf("no plugins loaded (name them: dp plugins PATH...; bare names are searched in DP_PLUGIN_PATH, then dp's plugin folder)\n");
  for (int i = 0; i < n; ++i) {
    const char *path = nullptr, *types = nullptr;
    check(dp_context_plugin_info(c, i, &path, &types), "plugins");
    std::printf("%s: %s\n", path, types);
  }
  return kOk;
}

static int devices() {
  unsigned n = std::thread::hardware_concurrency();
  std::printf("cpu: %u device(s), cpu:0 ... cpu:%u (one per core; a device list may name more)\n", n, n ? n - 1 : 0);
  const char* cpu = nullptr;
  check(dp_device_name("cpu", 0, &cpu), "devices");
  std::printf("cpu:0: %s\n", cpu);
  int gpus = 0;
  const char* why = "";
  check(dp_device_count("cuda", &gpus, &why), "devices");
  if (gpus == 0) std::printf("cuda: none (%s)\n", why);
  for (int i = 0; i < gpus; ++i) {
    const char* name = nullptr;
    check(dp_device_name("cuda", i, &name), "devices");
    std::printf("cuda:%d: %s\n", i, name);
  }
  return kOk;
}

}  // namespace dpcli

// Range checks whose messages say what is wanted (CLI11's own print the
// range as doubles: "Value 0 not in range 0.000000 to 1797693...").
static CLI::Validator at_least(int64_t least) {
  return CLI::Validator(
      [least](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 0);  // as CLI11 converts it (0x10, 010)
        if (text.empty() || *end != '\0' || errno == ERANGE || v < least)
          return "expected an integer >= " + std::to_string(least) + ", got '" + text + "'";
        return std::string();
      },
      "INT >= " + std::to_string(least));
}
static const CLI::Validator kNonNegativeNumber(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(v >= 0) || !std::isfinite(v))
        return "expected a finite number >= 0, got '" + text + "'";
      return std::string();
    },
    "NUMBER >= 0");

// The word of `known` at most two edits from `word` (Levenshtein), the
// nearest; "" if none.
static std::string closest(const std::string& word, const std::vector<std::string>& known) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  std::string guess;
  size_t best = 3;
  for (const auto& k : known)
    if (distance(word, k) < best) best = distance(word, k), guess = k;
  return guess;
}

// "dp trian ...": the command that was meant, instead of CLI11's "A
// subcommand is required".
static int unknown_command(const std::string& word, const std::vector<std::string>& known) {
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  const std::string guess = closest(word, known);
  std::fprintf(stderr, "dp: unknown command '%s'%s; the commands: %s (dp --help)\n", word.c_str(),
               guess.empty() ? "" : (" (did you mean '" + guess + "'?)").c_str(), list.c_str());
  return dpcli::kUsage;
}

int main(int argc, char** argv) {
  using namespace dpcli;
  CLI::App app{"dp: data-parallel training of JSON models (nn.DataParallel's semantics)"};
  app.require_subcommand(1);
  // An option given twice takes the last value, as argparse does (scripts
  // append overrides); --plugin, a list, takes them all.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_version_flag("--version", std::string(dp_version()));

  TrainOptions t;
  auto* train_cmd = app.add_subcommand("train", "train a model");
  train_cmd->add_option("model", t.model, "model JSON file")->required()->check(CLI::ExistingFile);
  train_cmd->add_option("--data", t.data, "fashion-mnist[:DIR] | mnist:DIR | cifar10:DIR | synthetic:N")->capture_default_str();
  train_cmd->add_option("--devices", t.devices, "auto | cpu:0,cpu:1,...")->capture_default_str();
  train_cmd->add_option("--epochs", t.epochs, "epochs")->check(at_least(1))->capture_default_str();
  train_cmd->add_option("--batch-size", t.batch_size, "batch size (split over the devices)")->check(at_least(1))->capture_default_str();
  train_cmd->add_option("--optimizer", t.optimizer, "optimizer JSON")->capture_default_str();
  train_cmd->add_option("--seed", t.seed, "the shuffling seed (initial weights and dropout come from the model JSON's \"seed\")")->check(at_least(0))->capture_default_str();
  train_cmd->add_option("--workers", t.workers, "data-loading threads")->check(at_least(0))->capture_default_str();
  train_cmd->add_option("--threads", t.threads, "threads per device")->check(CLI::Range(1, 256))->capture_default_str();
  train_cmd->add_option("--max-steps", t.max_steps, "stop after this many optimizer steps of this run (0: no limit), without evaluating; a later --resume goes on")
      ->check(at_least(0));
  train_cmd->add_option("--lr-schedule", t.lr_schedule,
                        "constant | cosine (annealed to 0 over all steps) | linear (its defaults) | a schedule's JSON, per "
                        "step: {\"type\": \"cosine_warmup\", \"warmup_steps\": 100} (step, exponential, multistep, "
                        "cosine_warmup and onecycle have keys without defaults: step_size, gamma, milestones, "
                        "warmup_steps, max_lr); types linear, step, exponential, multistep, "
                        "cosine, cosine_warmup, onecycle (PyTorch's OneCycleLR with cycle_momentum=False: dp does not "
                        "cycle momentum); T_max and total_steps default to the run's steps (dp.h, "
                        "dp_optimizer_set_lr_schedule)")
      ->capture_default_str();
  train_cmd->add_option("--save", t.save, "checkpoint to write after each epoch (and on Ctrl-C or SIGTERM)");
  train_cmd->add_option("--resume", t.resume, "checkpoint to continue from")->check(CLI::ExistingFile);
  train_cmd->add_option("--log", t.log, "append a JSON line per epoch (and per --eval-every evaluation) to this file, with the step and the lr its last step used");
  train_cmd->add_option("--plot", t.plot, "write a chart of the run (losses per step and epoch, test accuracy) to this SVG file");
  train_cmd->add_option("--clip-grad-norm", t.clip_grad_norm,
                        "clip the gradients' global 2-norm to this before each step (clip_grad_norm_; 0: off)")
      ->check(kNonNegativeNumber);
  auto* grad_scaler = train_cmd->add_option("--grad-scaler", t.grad_scaler,
                                            "dynamic loss scaling, torch.amp.GradScaler: a step with an inf/NaN gradient "
                                            "is skipped and the scale backs off; alone PyTorch's defaults, or JSON: "
                                            "{\"init_scale\": 65536, \"growth_factor\": 2, \"backoff_factor\": 0.5, "
                                            "\"growth_interval\": 2000}")
                              ->expected(0, 1);
  train_cmd->add_option("--accumulate", t.accumulate,
                        "batches per optimizer step (gradient accumulation: a step of K batches is one of a batch K "
                        "times larger)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  train_cmd->add_option("--eval-every", t.eval_every, "also evaluate on the test set every N optimizer steps (0: each epoch's end only)")
      ->check(at_least(0));
  train_cmd->add_option("--save-best", t.save_best, "keep a checkpoint of the best evaluation by --best-metric here");
  train_cmd->add_option("--best-metric", t.best_metric, "test_accuracy (higher is better) | test_loss (lower)")
      ->check(CLI::IsMember({"test_accuracy", "test_loss"}))
      ->capture_default_str();

  std::string e_model, e_ckpt, e_data = "fashion-mnist", e_devices = "auto";
  std::string e_transform;
  int64_t e_batch = 1000, e_workers = 2;
  auto* eval_cmd = app.add_subcommand("eval", "evaluate a checkpoint (or safetensors weights) on a test set");
  eval_cmd->add_option("model", e_model, "model JSON file")->required()->check(CLI::ExistingFile);
  eval_cmd->add_option("checkpoint", e_ckpt, "checkpoint or weights (.safetensors)")->required()->check(CLI::ExistingFile);
  eval_cmd->add_option("--data", e_data, "as for train")->capture_default_str();
  eval_cmd->add_option("--devices", e_devices, "as for train")->capture_default_str();
  eval_cmd->add_option("--batch-size", e_batch, "batch size")->check(at_least(1))->capture_default_str();
  eval_cmd->add_option("--workers", e_workers, "data-loading threads")->check(at_least(0))->capture_default_str();
  eval_cmd->add_option("--transform", e_transform,
                       "the test inputs' transform JSON (dp_dataset_set_transform); default: what the checkpoint "
                       "records, else --data's normalisation");

  std::string b_model, b_devices = "auto", b_opt = R"({"type": "sgd", "lr": 0.01, "momentum": 0.9})";
  int64_t b_batch = 256, b_steps = 50, b_threads = 1;
  auto* bench_cmd = app.add_subcommand("bench", "training samples/s on synthetic data");
  bench_cmd->add_option("model", b_model, "model JSON file")->required()->check(CLI::ExistingFile);
  bench_cmd->add_option("--devices", b_devices, "as for train")->capture_default_str();
  bench_cmd->add_option("--batch-size", b_batch, "batch size")->check(at_least(1))->capture_default_str();
  bench_cmd->add_option("--steps", b_steps, "timed steps")->check(at_least(1))->capture_default_str();
  bench_cmd->add_option("--threads", b_threads, "threads per device")->check(CLI::Range(1, 256))->capture_default_str();
  bench_cmd->add_option("--optimizer", b_opt, "optimizer JSON")->capture_default_str();

  std::string x_model, x_weights, x_onnx, x_safetensors;
  auto* export_cmd = app.add_subcommand(
      "export", "write a model with its trained weights for other runtimes (ONNX) or its weights for PyTorch");
  export_cmd->add_option("model", x_model, "model JSON file")->required()->check(CLI::ExistingFile);
  export_cmd->add_option("checkpoint", x_weights, "checkpoint or weights (.safetensors)")->required()->check(CLI::ExistingFile);
  export_cmd->add_option("--onnx", x_onnx,
                         "write this ONNX file (opset 17; evaluation form: batch norm with its running statistics, "
                         "dropout removed; input \"input\", output \"output\", batch dimension N)");
  export_cmd->add_option("--safetensors", x_safetensors,
                         "write the weights alone for PyTorch to this file: the keys of its state_dict() "
                         "(num_batches_tracked included, no optimizer state), for load_state_dict(strict=True)");

  app.add_subcommand("devices", "list the devices dp can use");

  std::vector<std::string> p_paths;
  auto* plugins_cmd = app.add_subcommand("plugins", "load plugins and list the layer types they register");
  plugins_cmd->add_option("paths", p_paths, "plugin files or names (searched in DP_PLUGIN_PATH, then dp's plugin folder)");
  for (auto* cmd : {train_cmd, eval_cmd, bench_cmd, export_cmd}) {
    cmd->add_option("--plugin", g_plugins, "load this layer plugin first (repeatable; a path, or a name in DP_PLUGIN_PATH or dp's plugin folder)")
        ->expected(1)  // one per --plugin: a list would take the model after it
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    cmd->add_flag("--allow-model-plugins", g_allow_model_plugins,
                  "let the model's JSON load plugin libraries it names by path (by default it may use plugins already "
                  "loaded with --plugin, or bare names in DP_PLUGIN_PATH or dp's plugin folder)");
    cmd->add_option("--memory-limit", g_memory_limit,
                    "bytes the model, its optimizer and batches may take (e.g. 8GB; default: the machine's available memory)")
        ->transform(CLI::AsSizeValue(true));
  }
  bool fast = false;
  for (auto* cmd : {train_cmd, bench_cmd}) {
    cmd->add_flag("--cudnn-benchmark", g_cudnn_benchmark,
                  "GPUs: time cuDNN's convolution algorithms on the first step, take the fastest (cudnn.benchmark)");
    cmd->add_flag("--allow-tf32", g_allow_tf32,
                  "GPUs: float32 matrix products and convolutions may use TF32 tensor cores (about 1e-3 relative error)");
    cmd->add_flag("--fast", fast,
                  "GPUs: the speed preset, --allow-tf32 and --cudnn-benchmark (the default is deterministic float32)");
    cmd->add_option("--precision", g_precision,
                    "fp32 (default); bf16 or fp16: mixed precision on GPUs, as torch.autocast (products and "
                    "convolutions in 16 bits, accumulated in float32; weights, gradients, optimizer and checkpoints "
                    "float32); dp train with fp16 turns on --grad-scaler")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  }

  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> known;
    for (const auto* sub : app.get_subcommands({})) known.push_back(sub->get_name());
    if (std::find(known.begin(), known.end(), argv[1]) == known.end()) return unknown_command(argv[1], known);
    // Python habits: --batch_size for --batch-size, --lr for the optimizer's JSON.
    const CLI::App* sub = app.get_subcommand(argv[1]);
    for (int i = 2; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.compare(0, 2, "--") != 0) continue;
      const bool has_value = arg.find('=') != std::string::npos;
      arg = arg.substr(0, arg.find('='));
      if (const CLI::Option* known = sub->get_option_no_throw(arg)) {
        if (!has_value && known->get_expected_min() > 0) ++i;  // its value may begin with "--" (--log --run.jsonl)
        continue;
      }
      std::string dashed = arg;
      std::replace(dashed.begin() + 2, dashed.end(), '_', '-');
      if (dashed != arg && sub->get_option_no_throw(dashed)) {
        std::fprintf(stderr, "dp: unknown option '%s' (did you mean '%s'?)\n", arg.c_str(), dashed.c_str());
        return kUsage;
      }
      if ((arg == "--lr" || arg == "--learning-rate" || arg == "--momentum" || arg == "--weight-decay" ||
           arg == "--betas") &&
          sub->get_option_no_throw("--optimizer")) {
        std::fprintf(stderr, "dp: unknown option '%s': the optimizer's settings go in --optimizer's JSON, e.g. "
                     "--optimizer '{\"type\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9, \"weight_decay\": 1e-4}'\n",
                     arg.c_str());
        return kUsage;
      }
      // A typo (--epoch), or PyTorch's name (--num-workers): the option meant, not CLI11's
      // "The following arguments were not expected".
      if (arg == "--") break;
      std::vector<std::string> names;
      for (const CLI::Option* opt : sub->get_options())
        for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
      std::string guess = arg == "--num-workers" && sub->get_option_no_throw("--workers") ? "--workers" : closest(arg, names);
      std::fprintf(stderr, "dp: unknown option '%s'%s (dp %s --help lists them)\n", arg.c_str(),
                   guess.empty() ? "" : (" (did you mean '" + guess + "'?)").c_str(), argv[1]);
      return kUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // `dp train --grad-scaler model.json ...`: its optional value took the
    // model (CLI11 then says only "model is required").
    if (dynamic_cast<const CLI::RequiredError*>(&e) && *train_cmd && t.model.empty() && grad_scaler->count() > 0 &&
        !t.grad_scaler.empty() && t.grad_scaler.front() != '{') {
      std::fprintf(stderr,
                   "dp: --grad-scaler took '%s' as its value (its JSON is optional): give the model before it, or "
                   "--grad-scaler '{}'\n",
                   t.grad_scaler.c_str());
      return kUsage;
    }
    int rc = app.exit(e);
    if (rc == 0 && (!std::cout.flush() || std::fflush(stdout) != 0)) {  // --help into a full disk or closed pipe
      std::fprintf(stderr, "dp: cannot write the help to stdout\n");
      return kRuntime;
    }
    return rc == 0 ? 0 : kUsage;
  }
  if (fast) g_allow_tf32 = g_cudnn_benchmark = true;
  if (grad_scaler->count() > 0 && t.grad_scaler.empty()) t.grad_scaler = "{}";  // --grad-scaler alone
  if (g_precision == "fp16" && t.grad_scaler.empty()) t.grad_scaler = "{}";  // fp16 trains with loss scaling
  // On a terminal the progress line is redrawn in place: an error starts below it.
  const char* fresh_line = ::isatty(2) ? "\n" : "";
  try {
    const int rc = *train_cmd    ? train(t)
                   : *eval_cmd   ? eval(e_model, e_ckpt, e_data, e_devices, e_batch, e_workers, e_transform)
                   : *bench_cmd  ? bench(b_model, b_devices, b_batch, b_steps, b_threads, b_opt)
                   : *export_cmd ? export_model(x_model, x_weights, x_onnx, x_safetensors)
                   : *plugins_cmd ? plugins(p_paths)
                                  : devices();
    // The result is stdout's last line: a run whose result could not be
    // written (a closed pipe, a full disk) did not succeed.
    errno = 0;
    const bool flushed = std::fflush(stdout) == 0;
    const int why = errno;
    if (!flushed || std::ferror(stdout))
      throw Failure(kRuntime, std::string("cannot write the result to stdout") +
                                  (why ? std::string(" (") + std::strerror(why) + ")" : std::string()));
    return rc;
  } catch (const Failure& f) {
    std::fprintf(stderr, "%sdp%s: %s\n", fresh_line, g_rank >= 0 ? (" (rank " + std::to_string(g_rank) + ")").c_str() : "", f.what());
    return f.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%sdp%s: %s\n", fresh_line, g_rank >= 0 ? (" (rank " + std::to_string(g_rank) + ")").c_str() : "", e.what());
    return kRuntime;
  }
}
