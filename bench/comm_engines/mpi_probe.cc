// Open MPI probe: bench / kill / det under mpirun.
// usage: mpirun ... mpi_probe bench|kill|det
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include <unistd.h>

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string mode = argc > 1 ? argv[1] : "bench";
  if (getenv("ERRRETURN")) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

  if (mode == "bench") {
    const size_t sizes[] = {64 << 10, 1 << 20, 32 << 20};
    for (size_t bytes : sizes) {
      size_t n = bytes / sizeof(float);
      std::vector<float> buf(n, 1.0f), src(n, 2.0f), dst(n);
      int iters = bytes <= (1 << 20) ? 200 : 10;
      std::vector<double> ar, mc;
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      for (int rep = 0; rep < 7; rep++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double a = MPI_Wtime();
        for (int i = 0; i < iters; i++)
          MPI_Allreduce(MPI_IN_PLACE, buf.data(), (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        ar.push_back((MPI_Wtime() - a) / iters);
        a = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
          memcpy(dst.data(), src.data(), bytes);
          asm volatile("" ::"r"(dst.data()) : "memory");
        }
        mc.push_back((MPI_Wtime() - a) / iters);
      }
      double t = median(ar), m = median(mc);
      double busbw = 2.0 * (size - 1) / size * bytes / t / 1e9;
      if (rank == 0)
        printf("mpi np=%d bytes=%zu allreduce_us=%.1f busbw_GBps=%.3f memcpy_us=%.1f memcpy_GBps=%.3f\n",
               size, bytes, t * 1e6, busbw, m * 1e6, bytes / m / 1e9);
    }
  } else if (mode == "det") {
    size_t n = (8 << 20) / sizeof(float) + 13;
    std::vector<float> buf(n);
    std::mt19937 g(1234 + rank);
    std::uniform_real_distribution<float> u(-1, 1);
    std::uniform_int_distribution<int> e(-20, 20);
    for (auto& x : buf) x = std::ldexp(u(g), e(g));
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    uint64_t h = 1469598103934665603ull;
    const unsigned char* b = (const unsigned char*)buf.data();
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ull;
    printf("rank %d det_hash=%016" PRIx64 "\n", rank, h);
  } else if (mode == "kill") {
    size_t n = (32 << 20) / sizeof(float);
    std::vector<float> buf(n, 1.0f);
    printf("rank %d pid %d\n", rank, (int)getpid());
    fflush(stdout);
    for (long it = 0;; it++) {
      double a = MPI_Wtime();
      int rc = MPI_Allreduce(MPI_IN_PLACE, buf.data(), (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      if (rc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING]; int l;
        MPI_Error_string(rc, s, &l);
        printf("rank %d: iter %ld MPI_Allreduce returned %d (%s) after %.3fs\n", rank, it, rc, s, MPI_Wtime() - a);
        fflush(stdout);
        return 4;
      }
      if (it == 0) { printf("rank %d: first iter ok\n", rank); fflush(stdout); }
    }
  }
  MPI_Finalize();
  return 0;
}
