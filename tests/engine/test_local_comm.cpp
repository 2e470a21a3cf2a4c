// The local communicator (engine/local_comm.h) against a plain sequential
// sum: members on their own threads or all from one thread, null inputs,
// shared and distinct outputs, chunks, broadcast, barrier, and an abort that
// wakes every waiter in bounded time and leaves the communicator reusable.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/local_comm.h"

using dp::LocalComm;

namespace {

struct Bucket {
  int64_t begin, count;
};

// members x buffers of n floats with distinct values; some members idle.
struct Setup {
  Setup(int members, int64_t n, unsigned seed) : in(members, std::vector<float>(n)) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& v : in)
      for (float& x : v) x = u(rng);
  }
  std::vector<std::vector<float>> in;
};

// The sum every test compares with: in member order, skipping idle members.
std::vector<float> expected(const Setup& s, const std::vector<bool>& idle) {
  const size_t n = s.in[0].size();
  std::vector<float> want(n, 0.f);
  std::vector<const float*> src;
  for (size_t m = 0; m < s.in.size(); ++m)
    if (!idle[m]) src.push_back(s.in[m].data());
  LocalComm::host_sum(want.data(), src.data(), static_cast<int>(src.size()), 0, static_cast<int64_t>(n));
  return want;
}

std::vector<Bucket> buckets_of(int64_t n, int64_t size) {
  std::vector<Bucket> b;  // in reverse, as backward finishes layers
  for (int64_t end = n; end > 0; end -= size) b.push_back({std::max<int64_t>(0, end - size), std::min(size, end)});
  return b;
}

}  // namespace

TEST_CASE("LocalComm: all-reduce from the members' threads equals the sequential sum, bitwise") {
  for (int members : {1, 2, 3, 8}) {
    for (int64_t chunk : {int64_t(0), int64_t(7), int64_t(1000)}) {
      for (bool eager : {true, false}) {
        CAPTURE(members);
        CAPTURE(chunk);
        CAPTURE(eager);
        const int64_t n = 5000;
        Setup s(members, n, 42 + members);
        std::vector<bool> idle(members, false);
        if (members > 2) idle[members - 1] = true;  // outside the split: adds nothing
        // Member 0's buffer is the shared destination, as the CPU engine does it.
        std::vector<float> out0 = s.in[0];
        auto buckets = buckets_of(n, 777);
        LocalComm comm(members, static_cast<int>(buckets.size()), &LocalComm::host_sum, chunk);
        comm.set_eager(eager);
        for (int round = 0; round < 3; ++round) {  // reused across runs, as across steps
          std::vector<float> dst = out0;
          std::vector<std::thread> threads;
          for (int m = 0; m < members; ++m)
            threads.emplace_back([&, m] {
              for (const Bucket& b : buckets) {
                const float* in = idle[m] ? nullptr : (m == 0 ? dst.data() : s.in[m].data()) + b.begin;
                comm.all_reduce(m, in, dst.data() + b.begin, b.count);
              }
              comm.wait(m);
            });
          for (auto& t : threads) t.join();
          std::vector<float> want = expected(s, idle);
          for (int64_t i = 0; i < n; ++i) REQUIRE(dst[i] == want[i]);
        }
      }
    }
  }
}

TEST_CASE("LocalComm: one thread for all members, distinct outputs, broadcast and barrier") {
  const int members = 3;
  const int64_t n = 100;
  Setup s(members, n, 7);
  std::vector<std::vector<float>> out(members, std::vector<float>(n, -5.f));
  LocalComm comm(members, 4, &LocalComm::host_sum, 0);
  for (int m = 0; m < members; ++m) comm.all_reduce(m, s.in[m].data(), out[m].data(), n);
  comm.wait(0);
  std::vector<float> want = expected(s, std::vector<bool>(members, false));
  for (int m = 0; m < members; ++m)
    for (int64_t i = 0; i < n; ++i) REQUIRE(out[m][i] == want[i]);
  // Every member's data becomes member 1's.
  for (int m = 0; m < members; ++m) comm.broadcast(m, s.in[m].data(), n, 1);
  comm.wait(2);
  for (int m = 0; m < members; ++m)
    for (int64_t i = 0; i < n; ++i) REQUIRE(s.in[m][i] == s.in[1][i]);
  std::atomic<int> passed{0};
  std::vector<std::thread> threads;
  for (int m = 0; m < members; ++m)
    threads.emplace_back([&, m] {
      comm.barrier(m);
      ++passed;
    });
  for (auto& t : threads) t.join();
  CHECK(passed == members);
}

// Not eager (CPU replicas): the last member to join leaves the work to
// members in wait(); eager, it computes at once. The sum is the same.
TEST_CASE("LocalComm: not eager, a collective is computed only in wait()") {
  const int members = 2;
  const int64_t n = 300;
  for (bool eager : {true, false}) {
    CAPTURE(eager);
    Setup s(members, n, 9);
    std::atomic<int> sums{0};
    LocalComm comm(members, 2, [&](float* out, const float* const* in, int k, int64_t b, int64_t e) {
      ++sums;
      LocalComm::host_sum(out, in, k, b, e);
    }, 100);
    comm.set_eager(eager);
    std::vector<float> out(n, -1.f);
    comm.all_reduce(0, s.in[0].data(), out.data(), n);
    comm.all_reduce(1, s.in[1].data(), out.data(), n);  // the last to join
    CHECK(sums.load() == (eager ? 3 : 0));               // 3 chunks of 100
    comm.wait(0);
    CHECK(sums.load() == 3);
    comm.wait(1);
    std::vector<float> want = expected(s, std::vector<bool>(members, false));
    for (int64_t i = 0; i < n; ++i) REQUIRE(out[i] == want[i]);
  }
}

// As the CUDA engine uses it for replicas sharing a GPU: one thread joins
// for every member, once per step, then waits for each.
TEST_CASE("LocalComm: one thread for all members, step after step") {
  const int members = 3;
  const int64_t n = 64;
  LocalComm comm(members, 1, &LocalComm::host_sum, 0);
  for (int step = 0; step < 5; ++step) {
    Setup s(members, n, 100 + step);
    std::vector<bool> idle(members, false);
    idle[step % members] = step % 2 == 1;  // an idle replica now and then
    std::vector<float> sum(n, -1.f);
    for (int m = 0; m < members; ++m) comm.all_reduce(m, idle[m] ? nullptr : s.in[m].data(), sum.data(), n);
    for (int m = 0; m < members; ++m) comm.wait(m);
    std::vector<float> want = expected(s, idle);
    for (int64_t i = 0; i < n; ++i) REQUIRE(sum[i] == want[i]);
  }
}

TEST_CASE("LocalComm: an abort wakes every waiter with the reason, and reset() makes it usable again") {
  const int members = 3;
  LocalComm comm(members, 2, &LocalComm::host_sum, 0);
  std::vector<float> a(10, 1.f), b(10, 2.f), out(10);
  std::atomic<int> failed{0};
  std::string message;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int m = 0; m < 2; ++m)  // member 2 never comes: it "failed" instead
    threads.emplace_back([&, m] {
      try {
        comm.all_reduce(m, m ? b.data() : a.data(), out.data(), 10);
        comm.wait(m);
      } catch (const dp::Error& e) {
        CHECK(e.status() == DP_ERR_DEVICE);
        if (m == 0) message = e.what();
        ++failed;
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comm.abort("replica 2 failed: a test");
  for (auto& t : threads) t.join();
  CHECK(failed == 2);
  CHECK(message.find("replica 2 failed: a test") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  // Calls on an aborted communicator fail at once.
  CHECK_THROWS_AS(comm.all_reduce(0, a.data(), out.data(), 10), dp::Error);

  REQUIRE(comm.reset());
  std::vector<float> c(10, 4.f);
  for (int m = 0; m < members; ++m) comm.all_reduce(m, m == 0 ? a.data() : m == 1 ? b.data() : c.data(), out.data(), 10);
  comm.wait(1);
  for (float v : out) CHECK(v == 7.f);
}

TEST_CASE("LocalComm: members that disagree on a count abort instead of reading past a buffer") {
  LocalComm comm(2, 2, &LocalComm::host_sum, 0);
  std::vector<float> a(10, 1.f), out(10);
  comm.all_reduce(0, a.data(), out.data(), 10);
  CHECK_THROWS_WITH_AS(comm.all_reduce(1, a.data(), out.data(), 9), doctest::Contains("member 1 passed 9 floats"),
                       dp::Error);
  CHECK_THROWS_AS(comm.wait(0), dp::Error);
}
