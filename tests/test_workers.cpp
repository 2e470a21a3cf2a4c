// The worker pool (src/core/workers.h): every task runs once, task t on
// worker t % n, whether the workers were spinning (runs back to back) or
// asleep (runs far apart); a task's exception reaches run()'s caller and the
// pool stays usable. Run under ThreadSanitizer too (tests/tsan).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/workers.h"

namespace {

struct Record {
  std::vector<std::atomic<int>> runs;
  std::vector<std::thread::id> thread;
  explicit Record(int tasks) : runs(tasks), thread(tasks) {}
  static void task(void* p, int t) {
    auto* r = static_cast<Record*>(p);
    r->runs[t].fetch_add(1);
    r->thread[t] = std::this_thread::get_id();
  }
};

void check_one_run(dp::Workers& pool, int tasks) {
  Record r(tasks);
  pool.run(tasks, &Record::task, &r);
  for (int t = 0; t < tasks; ++t) {
    CAPTURE(t);
    REQUIRE(r.runs[t].load() == 1);
    if (t >= pool.size()) CHECK((r.thread[t] == r.thread[t % pool.size()]));
  }
  CHECK((r.thread[0] == std::this_thread::get_id()));  // the caller is worker 0
}

}  // namespace

TEST_CASE("runs back to back (workers spinning) and far apart (workers asleep) each run every task once") {
  for (int n : {2, 3, 5}) {
    dp::Workers pool(n);
    CAPTURE(n);
    for (int i = 0; i < 3000; ++i) check_one_run(pool, n + i % (2 * n));
    for (int i = 0; i < 20; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past the spin: the workers sleep
      check_one_run(pool, 2 * n + 1);
    }
  }
}

TEST_CASE("a task's exception reaches the caller, the first one only, and the pool stays usable") {
  dp::Workers pool(3);
  struct Ctx {
    std::atomic<int> ran{0};
  } c;
  auto throwing = [](void* p, int t) {
    static_cast<Ctx*>(p)->ran.fetch_add(1);
    if (t % 2 == 1) throw std::runtime_error("task " + std::to_string(t));
  };
  for (int i = 0; i < 200; ++i) {
    c.ran = 0;
    CHECK_THROWS_AS(pool.run(6, throwing, &c), std::runtime_error);
    CHECK(c.ran.load() == 6);  // every task still ran
    check_one_run(pool, 7);
  }
}

TEST_CASE("a pool is destroyed whether its workers spin or sleep") {
  for (int i = 0; i < 50; ++i) {
    dp::Workers pool(4);
    check_one_run(pool, 4);
    if (i % 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
