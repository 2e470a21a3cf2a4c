#include "core/workers.h"

namespace dp {

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
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    do_share(worker);
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_.notify_one();
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
    pending_ = n_ - 1;
    ++generation_;
  }
  wake_.notify_all();
  do_share(0);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace dp
