#include "core/workers.h"

namespace dp {

namespace {

// Until ready() or about 50 microseconds (2048 pause instructions); whether it
// became ready.
template <class Ready>
bool spin_until(Ready ready) {
  for (int i = 0; i < 2048; ++i) {
    if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  return ready();
}

}  // namespace

Workers::Workers(int n) : n_(n < 1 ? 1 : n) {
  for (int w = 1; w < n_; ++w) threads_.emplace_back([this, w] { loop(w); });
}

Workers::~Workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void Workers::do_share(int worker) {
  for (int t = worker; t < tasks_; t += n_) {
    try {
      fn_(ctx_, t);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void Workers::loop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    auto woken = [&] { return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(woken)) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, woken);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);  // tasks_, fn_, ctx_ were written before it
    do_share(worker);
    // The last one out wakes the caller, under the lock: a caller between its
    // check and its wait holds it, so the notification cannot fall between.
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

void Workers::run(int tasks, void (*fn)(void*, int), void* ctx) {
  if (n_ == 1 || tasks <= 1) {
    for (int t = 0; t < tasks; ++t) fn(ctx, t);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_ = tasks;
    fn_ = fn;
    ctx_ = ctx;
    error_ = nullptr;
    pending_.store(n_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  do_share(0);
  auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, done);
  }
  // Every worker is done: error_ was written before its decrement.
  std::exception_ptr error = error_;
  error_ = nullptr;
  if (error) std::rethrow_exception(error);
}

}  // namespace dp
