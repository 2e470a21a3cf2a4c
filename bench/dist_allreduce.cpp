// All-reduce between processes over loopback, as dp's process groups run it
// (dp::GlooComm), at 64 B, 64 KB, 256 KB (a CPU group's bucket), 1 MB and 32 MB of float32, beside memcpy
// of the same size on this machine: a gradient bucket's all-reduce
// (all_reduce_bucket: Gloo's halving-doubling on sync connections, in
// 512 KB pieces) and the general one (Gloo's ring, the step's small
// exchanges), their times, and the bucket's algorithm bandwidth (bytes /
// time) and bus bandwidth (NCCL's convention: algbw * 2 (n - 1) / n, the
// bytes each rank moves), so that engines and machines compare.
//
//   build/bench/dist_allreduce [WORLD]      (default 2 processes; forked here)
//   mpirun -np 2 -x DP_BACKEND=mpi build/bench/dist_allreduce
//                                           (the mpi backend: dp::MpiComm, Open MPI's
//                                            Iallreduce; "bucket" and "general" are the same call)
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dist/process_group.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

// One rank's part: the table (rank 0 prints it). Returns the exit status.
int run_rank(const dp::DistConfig& c) {
  const int r = c.rank, world = c.world_size;
  const std::vector<int64_t> sizes = {64, 64 << 10, 256 << 10, 1 << 20, 32 << 20};  // bytes: a step's small exchanges, buckets
  const int rounds = 20;
  try {
    dp::ProcessGroup pg(c);
    dp::Communicator& comm = *pg.comm();
    if (r == 0) {
      std::printf("all-reduce of float32 over %d processes on loopback (%s), beside memcpy\n", world,
                  c.backend == "mpi" ? "Open MPI: shared memory on one machine" : "Gloo, TCP");
      std::printf("%10s %12s %12s %12s %12s %14s %14s\n", "size", "bucket (us)", "algbw GB/s", "busbw GB/s",
                  "general (us)", "memcpy (us)", "memcpy GB/s");
    }
    for (const int64_t& bytes : sizes) {
      const int64_t n = bytes / 4;
      std::vector<float> a(static_cast<size_t>(n), 1.0f), b(static_cast<size_t>(n));
      // A fixed number of calls, the same on every rank; the median of
      // `rounds` timed batches of calls.
      const int calls = bytes <= (1 << 20) ? 50 : 4;
      const int key = static_cast<int>(&bytes - sizes.data());
      // Bucket and general calls alternate by round, so that both see the same machine.
      std::vector<double> times, general;
      for (int w = 0; w < 2; ++w) comm.all_reduce(r, a.data(), a.data(), n), comm.all_reduce_bucket(r, key, a.data(), n);
      for (int k = 0; k < 2 * rounds; ++k) {
        comm.barrier(r);
        const auto t0 = Clock::now();
        for (int i = 0; i < calls; ++i)
          if (k % 2)
            comm.all_reduce(r, a.data(), a.data(), n);
          else
            comm.all_reduce_bucket(r, key, a.data(), n);
        (k % 2 ? general : times).push_back(seconds_since(t0) / calls);
      }
      std::vector<double> copies;
      for (int k = 0; k < rounds; ++k) {
        const auto t0 = Clock::now();
        for (int i = 0; i < calls; ++i) {
          std::memcpy(b.data(), a.data(), static_cast<size_t>(bytes));
          a[static_cast<size_t>(i) % a.size()] = b[0];  // keep the copy
        }
        copies.push_back(seconds_since(t0) / calls);
      }
      std::sort(times.begin(), times.end());
      std::sort(general.begin(), general.end());
      std::sort(copies.begin(), copies.end());
      const double t = times[times.size() / 2], g = general[general.size() / 2], m = copies[copies.size() / 2];
      const double algbw = static_cast<double>(bytes) / t / 1e9;
      if (r == 0)
        std::printf("%10s %12.1f %12.2f %12.2f %12.1f %14.1f %14.2f\n",
                    bytes >= (1 << 20)   ? (std::to_string(bytes >> 20) + " MB").c_str()
                    : bytes >= (1 << 10) ? (std::to_string(bytes >> 10) + " KB").c_str()
                                         : (std::to_string(bytes) + " B").c_str(),
                    t * 1e6, algbw, algbw * 2 * (world - 1) / world, g * 1e6, m * 1e6,
                    static_cast<double>(bytes) / m / 1e9);
    }
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", r, e.what());
    return 1;
  }
}

int main(int argc, char** argv) {
  // Under mpirun: this process is one rank (DP_BACKEND from the environment).
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    dp::DistConfig c = dp::dist_config_from_env();
    c.timeout_s = 60;
    return c.world_size < 2 ? 2 : run_rank(c);
  }
  const int world = argc > 1 ? std::atoi(argv[1]) : 2;
  if (world < 2 || world > 64) {
    std::fprintf(stderr, "usage: dist_allreduce [WORLD in 2..64]\n");
    return 2;
  }
  std::mt19937 pick(static_cast<unsigned>(::getpid()));
  const int port = 20000 + static_cast<int>(pick() % 12000);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) return 1;
    if (pid > 0) {
      pids.push_back(pid);
      continue;
    }
    dp::DistConfig c;
    c.rank = r;
    c.world_size = world;
    c.master_port = port;
    c.timeout_s = 60;
    ::_exit(run_rank(c));
  }
  int rc = 0;
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  return rc;
}
