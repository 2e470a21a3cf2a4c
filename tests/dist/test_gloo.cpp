// The communicator of a process group's processes (dist/gloo_comm.h), with
// real processes over loopback: all-reduce sums as a plain sum does, and
// bitwise the same on every rank and in every run of one world size;
// broadcast and barrier; and a rank killed with SIGKILL mid-all-reduce makes
// every survivor's call fail within seconds, not hang.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/gloo_comm.h"
#include "dist/store.h"
#include "ranks.h"

namespace {

// Rank r's data: values of mixed magnitude, so that the order of a sum shows.
std::vector<float> data_of(int rank, size_t n) {
  std::mt19937 g(1234 + rank);
  std::uniform_real_distribution<float> u(-1, 1);
  std::uniform_int_distribution<int> e(-12, 12);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(u(g), e(g));
  return v;
}

uint64_t hash_of(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char* b = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

template <class F>
RankFn in_group(int rank, int world, int port, double timeout_s, F body) {
  return joined_rank(rank, world, port, timeout_s, [body](dp::TcpStore& store, const dp::DistConfig& c) {
    dp::GlooComm comm(store, c);
    return body(comm);
  });
}

// Every rank's result of one all-reduce of n floats: its hash, and whether it
// matches the rank-order sum within float tolerance.
std::vector<Outcome> all_reduce_world(int world, size_t n) {
  const int port = free_port();
  std::vector<RankFn> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(in_group(r, world, port, 20, [=](dp::GlooComm& comm) {
      std::vector<float> mine = data_of(r, n), out(n);
      comm.all_reduce(r, mine.data(), out.data(), static_cast<int64_t>(n));
      double worst = 0;
      for (size_t i = 0; i < n; ++i) {
        double want = 0, scale = 0;
        for (int k = 0; k < world; ++k) want += data_of(k, n)[i], scale += std::fabs(data_of(k, n)[i]);
        worst = std::fmax(worst, std::fabs(out[i] - want) / (scale + 1e-30));
      }
      if (worst > 1e-6) throw std::runtime_error("sum off by " + std::to_string(worst) + " of its scale");
      char buf[32];
      std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash_of(out)));
      return std::string(buf);
    }));
  return run_ranks(ranks, 60);
}

}  // namespace

TEST_CASE("Gloo all-reduce over 2 and 3 processes: the sum, bitwise the same on every rank and in every run") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    auto first = all_reduce_world(world, 1000);
    auto second = all_reduce_world(world, 1000);
    for (int r = 0; r < world; ++r) {
      CAPTURE(first[r].message);
      CHECK(first[r].status == 0);
      CHECK(first[r].message == first[0].message);   // every rank holds the same bits
      CHECK(second[r].message == first[r].message);  // and so does every run
    }
  }
}

TEST_CASE("Gloo broadcast and barrier") {
  const int port = free_port();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back(in_group(r, 3, port, 20, [=](dp::GlooComm& comm) {
      std::vector<float> v = data_of(r, 100);
      comm.broadcast(r, v.data(), 100, 2);
      comm.barrier(r);
      if (v != data_of(2, 100)) throw std::runtime_error("rank " + std::to_string(r) + " did not get rank 2's data");
      return std::string();
    }));
  for (const Outcome& o : run_ranks(ranks, 60)) {
    CAPTURE(o.message);
    CHECK(o.status == 0);
  }
}

TEST_CASE("gradient buckets over 2 and 3 processes: the sum, in pieces, bitwise the same on every rank and call, after data moved on one rank") {
  const size_t sizes[] = {100, (128 << 10) + 7, 300000};  // 1, 2 and 3 pieces of 512 KB
  for (int world : {2, 3}) {
    CAPTURE(world);
    const int port = free_port();
    std::vector<RankFn> ranks;
    for (int r = 0; r < world; ++r)
      ranks.push_back(in_group(r, world, port, 20, [=](dp::GlooComm& comm) {
        std::string hashes;
        std::vector<std::vector<float>> a(3), b(3);
        for (int call = 0; call < 3; ++call) {
          for (int k = 0; k < 3; ++k) {
            const size_t n = sizes[k];
            // Rank 1's data moves on the second call (a new array), and back.
            std::vector<float>& buf = (r == 1 && call == 1) ? b[static_cast<size_t>(k)] : a[static_cast<size_t>(k)];
            buf = data_of(r, n);
            comm.all_reduce_bucket(r, k, buf.data(), static_cast<int64_t>(n));
            std::vector<double> want(n, 0.0), scale(n, 0.0);
            for (int q = 0; q < world; ++q) {
              const std::vector<float> x = data_of(q, n);
              for (size_t i = 0; i < n; ++i) want[i] += x[i], scale[i] += std::fabs(x[i]);
            }
            double worst = 0;
            for (size_t i = 0; i < n; ++i) worst = std::fmax(worst, std::fabs(buf[i] - want[i]) / (scale[i] + 1e-30));
            if (worst > 1e-6) throw std::runtime_error("bucket " + std::to_string(k) + " off by " + std::to_string(worst));
            char h[20];
            std::snprintf(h, sizeof h, "%016llx", static_cast<unsigned long long>(hash_of(buf)));
            if (call == 0) {
              hashes += h;
            } else if (hashes.substr(static_cast<size_t>(k) * 16, 16) != h) {
              throw std::runtime_error("call " + std::to_string(call) + " of bucket " + std::to_string(k) + " gave other bits");
            }
          }
        }
        return hashes;
      }));
    auto out = run_ranks(ranks, 60);
    for (int r = 0; r < world; ++r) {
      CAPTURE(out[r].message);
      CHECK(out[r].status == 0);
      CHECK(out[r].message == out[0].message);
    }
  }
}

TEST_CASE("an abort from another thread ends this rank's bucket all-reduce in flight at once") {
  const int port = free_port();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(in_group(r, 2, port, 30, [=](dp::GlooComm& comm) {
      std::vector<float> v(1000, 1.f);
      comm.all_reduce_bucket(r, 0, v.data(), 1000);
      if (r == 1) {  // takes no part in the next one
        std::this_thread::sleep_for(std::chrono::seconds(6));
        return std::string();
      }
      std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        comm.abort("aborted by the test");
      });
      const auto t0 = std::chrono::steady_clock::now();
      std::string what;
      try {
        comm.all_reduce_bucket(r, 0, v.data(), 1000);
      } catch (const dp::Error& e) {
        what = e.what();
      }
      aborter.join();
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (what.find("aborted by the test") == std::string::npos) throw std::runtime_error("not aborted: " + what);
      if (took > 3) throw std::runtime_error("the abort took " + std::to_string(took) + " s to end the call");
      return what;
    }));
  for (const Outcome& o : run_ranks(ranks, 60)) {
    CAPTURE(o.message);
    CHECK(o.status == 0);
  }
}

TEST_CASE("a rank killed mid-all-reduce: every survivor's call fails within seconds, and the group stays failed") {
  for (bool bucket : {false, true}) {
  CAPTURE(bucket);
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<RankFn> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back(in_group(r, 3, port, 20, [=](dp::GlooComm& comm) {
      std::vector<float> v(1 << 20, 1.f);
      for (int it = 0;; ++it) {
        if (r == 1 && it == 3) ::raise(SIGKILL);
        try {
          if (bucket)
            comm.all_reduce_bucket(r, 0, v.data(), static_cast<int64_t>(v.size()));
          else
            comm.all_reduce(r, v.data(), v.data(), static_cast<int64_t>(v.size()));
        } catch (const dp::Error& e) {
          if (e.status() != DP_ERR_COMM) throw std::runtime_error("status " + std::to_string(e.status()));
          try {  // broken for good
            comm.barrier(r);
          } catch (const dp::Error& again) {
            return std::string(e.what()) + " | then: " + again.what();
          }
          throw std::runtime_error("the group worked again after a peer died");
        }
      }
    }));
  auto out = run_ranks(ranks, 60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(out[1].status == -1);  // the victim
  for (int r : {0, 2}) {
    CAPTURE(out[r].message);
    CHECK(out[r].status == 0);
    CHECK(out[r].message.find("an all-reduce failed on rank " + std::to_string(r) + " of 3") != std::string::npos);
    CHECK(out[r].message.find("cannot be used again") != std::string::npos);
    CHECK(out[r].message.find("rank 1 died or left") != std::string::npos);
  }
  CHECK(took < 15);  // well inside the 20 s limit: the failure is noticed, not timed out
  }
}
