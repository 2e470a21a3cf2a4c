#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "cli.h"

namespace dpcli {

void check(dp_status s, const std::string& what) {
  if (s == DP_OK) return;
  int code = (s == DP_ERR_NUMERIC || s == DP_ERR_OUT_OF_MEMORY || s == DP_ERR_INTERNAL || s == DP_ERR_COMM) ? kRuntime : kUsage;
  throw Failure(code, what + ": " + dp_last_error());
}

void check_write(dp_status s, const std::string& what) {
  if (s == DP_ERR_IO) throw Failure(kRuntime, what + ": " + dp_last_error());  // a full disk is not bad usage
  check(s, what);
}

// Launched by torchrun, mpirun or srun (the variables they set), this
// process joins their process group.
Launch join_if_launched() {
  Launch out;
  const char* worlds[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"};
  bool launched = false;
  for (const char* v : worlds) launched = launched || std::getenv(v);
  if (!launched) return out;
  dp_process_group* pg = nullptr;
  check(dp_process_group_create(nullptr, &pg), "process group");
  ProcessGroup group(pg);
  check(dp_process_group_world_size(pg, &out.world), "process group");
  if (out.world == 1) return out;
  check(dp_process_group_rank(pg, &out.rank), "process group");
  check(dp_process_group_local_world_size(pg, &out.local_processes), "process group");
  check(dp_process_group_local_rank(pg, &out.local_rank), "process group");
  out.pg = std::move(group);
  return out;
}

int launched_rank() {
  for (const char* v : {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    if (const char* r = std::getenv(v)) return std::atoi(r);
  return 0;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "auto": every GPU when there is one (as nn.DataParallel takes all visible
// GPUs), else one CPU device per core; in a process group, this process's
// share of the machine's GPUs, or every GPU it sees when CUDA_VISIBLE_DEVICES
// shows it fewer than there are processes, or else its share of the cores.
std::string resolve_devices(const std::string& spec, int local_processes, int local_rank) {
  if (spec != "auto") return spec;
  int n = 0, first = 0;
  const char* kind = "cuda";
  if (dp_device_count("cuda", &n, nullptr) != DP_OK) n = 0;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (local_processes > 0 && n >= local_processes) {
    n /= local_processes;
    first = local_rank * n;
  } else if (local_processes > 0 && n > 0 && visible && *visible) {
    // The launcher showed each process its own GPUs: all of them.
  } else if (local_processes > 0 || n == 0) {
    kind = "cpu";
    dp_device_count("cpu", &n, nullptr);
    if (local_processes > 0) n = std::max(1, n / local_processes);
  }
  std::string out;
  for (int i = first; i < first + n; ++i) out += (i > first ? "," : "") + std::string(kind) + ":" + std::to_string(i);
  return out;
}

Progress::Progress() : tty_(isatty(STDERR_FILENO) == 1) {}

static std::string hms(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  long t = static_cast<long>(s + 0.5);
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

void Progress::step(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, int64_t accumulate, int64_t opt_step,
                    double loss, double sps, double eta) {
  double t = now_seconds();
  double every = tty_ ? 0.1 : 5.0;
  if (last_ >= 0 && t - last_ < every && batch != batches) return;
  last_ = t;
  char buf[256], at[96];
  if (accumulate > 1)  // batches and optimizer steps differ: both, named
    std::snprintf(at, sizeof at, "batch %lld/%lld (step %lld)", (long long)batch, (long long)batches, (long long)opt_step);
  else
    std::snprintf(at, sizeof at, "step %lld/%lld", (long long)batch, (long long)batches);
  std::snprintf(buf, sizeof buf, "epoch %lld/%lld  %s  loss %.4f  %.0f samples/s  ETA %s", (long long)epoch + 1,
                (long long)epochs, at, loss, sps, hms(eta).c_str());
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", buf);
    dirty_ = true;
  } else {
    std::fprintf(stderr, "%s\n", buf);
  }
  std::fflush(stderr);
}

void Progress::line(const std::string& text) {
  if (dirty_) std::fprintf(stderr, "\r\033[K");
  dirty_ = false;
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

}  // namespace dpcli
