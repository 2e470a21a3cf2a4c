// A fixed set of persistent threads. The caller of run() is worker 0, so a set
// of n workers owns n-1 threads. Used twice: by a device group (one worker per
// device, task i always runs on worker i) and inside a device (intra-op
// parallelism). No allocation per run(): tasks are a function pointer and a
// context pointer. A worker that runs out of work, and the caller waiting
// for the others, spin briefly (about 50 microseconds) before they sleep on
// the condition variable: a step runs dozens of parallel regions a few
// microseconds apart, and waking a sleeping thread costs tens of
// microseconds on a virtual machine (OpenMP runtimes spin likewise).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dp {

class Workers {
 public:
  explicit Workers(int n);
  ~Workers();
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  int size() const { return n_; }
  // Runs fn(ctx, t) for every t in [0, tasks); worker w takes t = w, w+n, ...
  // Returns when all are done and rethrows the first exception one raised.
  // Not reentrant: one run() at a time per Workers.
  void run(int tasks, void (*fn)(void*, int), void* ctx);

 private:
  void loop(int worker);
  void do_share(int worker);

  int n_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  // Written under mu_ (so that sleepers see them), read by spinners without it.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  int tasks_ = 0;
  void (*fn_)(void*, int) = nullptr;
  void* ctx_ = nullptr;
  std::exception_ptr error_;
};

// parallel_for(pool, n, grain, f): calls f(begin, end) over [0, n) in at most
// pool->size() contiguous ranges of at least `grain` items. pool may be null.
template <class F>
void parallel_for(Workers* pool, int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  int64_t parts = pool ? pool->size() : 1;
  if (grain < 1) grain = 1;
  if (parts > n / grain) parts = n / grain;
  if (parts <= 1) {
    f(int64_t{0}, n);
    return;
  }
  struct Ctx {
    F* f;
    int64_t n, parts;
  } c{&f, n, parts};
  pool->run(static_cast<int>(parts),
            [](void* p, int t) {
              auto* c = static_cast<Ctx*>(p);
              int64_t b = c->n * t / c->parts, e = c->n * (t + 1) / c->parts;
              (*c->f)(b, e);
            },
            &c);
}

}  // namespace dp
