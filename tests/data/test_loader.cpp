// Loaders: the epoch order, batch counts, seek / position, workers, config
// errors, and shutdown.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "data_util.h"

namespace {

dp_loader* make_loader(dp_dataset* ds, const std::string& cfg) {
  dp_loader* l = nullptr;
  DP_REQUIRE_OK(dp_loader_create(ds, cfg.c_str(), &l));
  return l;
}

std::string cfg_of(int64_t batch, bool shuffle, int workers, int64_t seed, bool drop_last = false, int prefetch = 2) {
  return "{\"batch_size\": " + std::to_string(batch) + ", \"shuffle\": " + (shuffle ? "true" : "false") +
         ", \"num_workers\": " + std::to_string(workers) + ", \"seed\": " + std::to_string(seed) +
         ", \"drop_last\": " + (drop_last ? "true" : "false") + ", \"prefetch\": " + std::to_string(prefetch) + "}";
}

std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> v;
  for (const auto& b : batches) v.insert(v.end(), b.begin(), b.end());
  return v;
}

std::pair<int64_t, int64_t> position(dp_loader* l) {
  int64_t e = -1, b = -1;
  DP_REQUIRE_OK(dp_loader_position(l, &e, &b));
  return {e, b};
}

}  // namespace

TEST_CASE("loader: the order is a pure function of (seed, epoch), a permutation, the same for 0, 1, 2 workers") {
  Fixture f;
  const int64_t n = 103;
  dp_dataset* ds = index_dataset(f.ctx, n);
  std::vector<std::vector<int64_t>> epochs;  // of workers = 0
  for (int workers : {0, 1, 2}) {
    CAPTURE(workers);
    dp_loader* l = make_loader(ds, cfg_of(10, true, workers, 42));
    for (int e = 0; e < 3; ++e) {
      auto batches = epoch_batches(l, f);
      CHECK(batches.size() == 11);
      CHECK(batches.back().size() == 3);
      auto order = flat(batches);
      if (workers == 0) {
        epochs.push_back(order);
        auto sorted = order;
        std::sort(sorted.begin(), sorted.end());
        std::vector<int64_t> iota(n);
        std::iota(iota.begin(), iota.end(), 0);
        CHECK(sorted == iota);  // a permutation
        CHECK(order != iota);   // shuffled
      } else {
        CHECK(order == epochs[static_cast<size_t>(e)]);
      }
    }
    dp_loader_destroy(l);
  }
  CHECK(epochs[0] != epochs[1]);
  CHECK(epochs[1] != epochs[2]);

  // Inputs travel with their targets: row r is (i, -i) for target i.
  dp_loader* l = make_loader(ds, cfg_of(10, true, 2, 42));
  auto t = next_targets(l, f);
  auto x = contents<float>(f.x);
  CHECK(shape_of(f.x) == std::vector<int64_t>{10, 2});
  for (size_t r = 0; r < t.size(); ++r) {
    CHECK(x[2 * r] == static_cast<float>(t[r]));
    CHECK(x[2 * r + 1] == -static_cast<float>(t[r]));
  }
  dp_loader_destroy(l);

  // Another seed, another order; shuffle off: the identity.
  l = make_loader(ds, cfg_of(10, true, 0, 43));
  CHECK(flat(epoch_batches(l, f)) != epochs[0]);
  dp_loader_destroy(l);
  l = make_loader(ds, cfg_of(10, false, 2, 42));
  for (int e = 0; e < 2; ++e) {
    auto order = flat(epoch_batches(l, f));
    for (int64_t i = 0; i < n; ++i) CHECK(order[static_cast<size_t>(i)] == i);
  }
  dp_loader_destroy(l);
  dp_dataset_destroy(ds);
}

TEST_CASE("loader: drop_last as PyTorch") {
  Fixture f;
  dp_dataset* ds = index_dataset(f.ctx, 10);
  struct Case {
    int64_t batch;
    bool drop_last;
    std::vector<size_t> sizes;
  };
  for (const Case& c : {Case{3, false, {3, 3, 3, 1}}, Case{3, true, {3, 3, 3}}, Case{5, false, {5, 5}},
                        Case{5, true, {5, 5}}, Case{10, true, {10}}, Case{11, false, {10}}, Case{11, true, {}}}) {
    for (int workers : {0, 2}) {
      CAPTURE(c.batch);
      CAPTURE(c.drop_last);
      CAPTURE(workers);
      dp_loader* l = make_loader(ds, cfg_of(c.batch, true, workers, 1, c.drop_last));
      int64_t k = -1;
      DP_REQUIRE_OK(dp_loader_num_batches(l, &k));
      CHECK(k == static_cast<int64_t>(c.sizes.size()));
      for (int e = 0; e < 2; ++e) {
        auto batches = epoch_batches(l, f);
        std::vector<size_t> sizes;
        for (auto& b : batches) sizes.push_back(b.size());
        CHECK(sizes == c.sizes);
        CHECK(position(l) == std::make_pair<int64_t, int64_t>(e + 1, 0));
      }
      dp_loader_destroy(l);
    }
  }
  dp_dataset_destroy(ds);
}

TEST_CASE("loader: position and seek resume exactly the same batches") {
  Fixture f;
  dp_dataset* ds = index_dataset(f.ctx, 25);  // 4 batches of 7: 7, 7, 7, 4
  for (int workers : {0, 1, 2}) {
    CAPTURE(workers);
    // The reference: (position before the call, the batch) over 3 epochs.
    dp_loader* ref = make_loader(ds, cfg_of(7, true, workers, 9));
    std::vector<std::pair<std::pair<int64_t, int64_t>, std::vector<int64_t>>> seq;
    CHECK(position(ref) == std::make_pair<int64_t, int64_t>(0, 0));
    for (int i = 0; i < 15; ++i) {
      auto pos = position(ref);
      seq.push_back({pos, next_targets(ref, f)});
    }
    CHECK(seq[4].first == std::make_pair<int64_t, int64_t>(0, 4));  // the end of epoch 0
    CHECK(seq[4].second.empty());
    CHECK(seq[5].first == std::make_pair<int64_t, int64_t>(1, 0));

    // From every position, a new loader (as after a restart) and the same
    // loader, seeked while its workers run ahead, continue identically.
    for (size_t start = 0; start < seq.size(); ++start) {
      CAPTURE(start);
      dp_loader* l = make_loader(ds, cfg_of(7, true, workers, 9));
      for (dp_loader* which : {l, ref}) {
        DP_REQUIRE_OK(dp_loader_seek(which, seq[start].first.first, seq[start].first.second));
        for (size_t i = start; i < seq.size(); ++i) {
          CHECK(position(which) == seq[i].first);
          CHECK(next_targets(which, f) == seq[i].second);
        }
      }
      dp_loader_destroy(l);
    }
    // Out-of-range positions are refused and change nothing.
    auto before = position(ref);
    CHECK(dp_loader_seek(ref, 0, 5) == DP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(dp_last_error()).find("position (0, 5) is outside the loader's: the batch must be in [0, 4] (4 "
                                            "batches an epoch)") != std::string::npos);
    CHECK(dp_loader_seek(ref, -1, 0) == DP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(dp_last_error()).find("the epoch must be in [0, ") != std::string::npos);
    CHECK(dp_loader_seek(ref, 0, -1) == DP_ERR_INVALID_ARGUMENT);
    CHECK(position(ref) == before);
    dp_loader_destroy(ref);
  }
  dp_dataset_destroy(ds);
}

TEST_CASE("loader: config errors name the key") {
  Fixture f;
  dp_dataset* ds = index_dataset(f.ctx, 10);
  dp_loader* l = nullptr;
  CHECK_FAILS(dp_loader_create(ds, "{\"batch_size\": ", &l), DP_ERR_JSON, "loader JSON");
  CHECK_FAILS(dp_loader_create(ds, R"({"batch_size": 1e999})", &l), DP_ERR_JSON, "loader JSON", "number overflow");
  // Found by tests/fuzz: quoting a value nested 200000 deep overflowed the stack.
  const std::string deep = "{\"batch_size\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  CHECK_FAILS(dp_loader_create(ds, deep.c_str(), &l), DP_ERR_MODEL,
              "/batch_size: expected a positive integer, got [[[[[[[[[...]]]]]]]]]");
  CHECK_FAILS(dp_loader_create(ds, R"({"batch_size": 0})", &l), DP_ERR_MODEL,
              "/batch_size: expected a positive integer, got 0");
  CHECK_FAILS(dp_loader_create(ds, R"({"batch_size": 2, "shuffle": 1})", &l), DP_ERR_MODEL, "/shuffle: expected true or false");
  CHECK_FAILS(dp_loader_create(ds, R"({"num_workers": -1})", &l), DP_ERR_MODEL, "/num_workers");
  CHECK_FAILS(dp_loader_create(ds, R"({"num_workers": 100000})", &l), DP_ERR_MODEL, "/num_workers", "at most");
  CHECK_FAILS(dp_loader_create(ds, R"({"prefetch": 0})", &l), DP_ERR_MODEL, "/prefetch");
  // PyTorch's name for it is taken too, checked alike; not both.
  CHECK_FAILS(dp_loader_create(ds, R"({"prefetch_factor": 0})", &l), DP_ERR_MODEL, "/prefetch_factor");
  CHECK_FAILS(dp_loader_create(ds, R"({"prefetch_factor": 2, "prefetch": 2})", &l), DP_ERR_MODEL, "not both");
  CHECK_FAILS(dp_loader_create(ds, R"({"seed": -3})", &l), DP_ERR_MODEL, "/seed");
  CHECK_FAILS(dp_loader_create(ds, R"({"batch": 4})", &l), DP_ERR_MODEL, "/batch: unknown key 'batch'");
  CHECK_FAILS(dp_loader_create(ds, "[1]", &l), DP_ERR_MODEL, "expected an object");
  CHECK(l == nullptr);
  // Defaults as PyTorch: batch_size 1, no shuffle.
  l = make_loader(ds, "{}");
  int64_t k = 0;
  DP_REQUIRE_OK(dp_loader_num_batches(l, &k));
  CHECK(k == 10);
  CHECK(next_targets(l, f) == std::vector<int64_t>{0});
  CHECK(dp_loader_next(l, f.x, f.x, &k) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_loader_next(l, f.x, nullptr, &k) == DP_ERR_INVALID_ARGUMENT);
  dp_loader_destroy(l);
  l = make_loader(ds, R"({"prefetch_factor": 3, "num_workers": 1})");
  CHECK(next_targets(l, f) == std::vector<int64_t>{0});
  dp_loader_destroy(l);
  dp_dataset_destroy(ds);
}

namespace {

int slow_item(void*, int64_t index, float* input, void* target, char*, size_t) {
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  input[0] = static_cast<float>(index);
  *static_cast<int64_t*>(target) = index;
  return 0;
}

}  // namespace

TEST_CASE("loader: destroy stops its workers promptly, mid-batch") {
  Fixture f;
  dp_dataset_callbacks cb = callbacks(nullptr, 1000, slow_item);
  int64_t shape = 1;
  dp_dataset* ds = nullptr;
  DP_REQUIRE_OK(dp_dataset_from_callbacks(f.ctx, &cb, 1, &shape, DP_I64, 0, nullptr, &ds));
  // A batch takes 100 samples x 10 ms = 1 s; destroying must not wait for one.
  dp_loader* l = make_loader(ds, cfg_of(100, false, 2, 0));
  int64_t rows = 0;
  DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
  CHECK(rows == 100);
  auto t0 = std::chrono::steady_clock::now();
  dp_loader_destroy(l);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(ms < 300);
  // A seek does not wait for the batches in progress either.
  l = make_loader(ds, cfg_of(100, false, 2, 0));
  DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
  t0 = std::chrono::steady_clock::now();
  DP_REQUIRE_OK(dp_loader_seek(l, 0, 9));
  ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(ms < 100);
  auto t = next_targets(l, f);
  CHECK(t.front() == 900);
  dp_loader_destroy(l);
  dp_dataset_destroy(ds);
}

namespace {

// A dataset whose get_item destroys its own loader at index 50 (as Python's
// garbage collector may, on the worker thread): the destructor cannot join
// that thread, which aborted the process.
struct SelfDestroy {
  std::atomic<dp_loader*> loader{nullptr};
  std::atomic<bool> go{false}, destroyed{false}, released{false};
};

int self_destroy_item(void* user, int64_t index, float* input, void* target, char*, size_t) {
  auto* u = static_cast<SelfDestroy*>(user);
  if (index == 50) {
    for (int i = 0; i < 2000 && !u->go; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    dp_loader_destroy(u->loader.exchange(nullptr));
    u->destroyed = true;
  }
  input[0] = static_cast<float>(index);
  *static_cast<int64_t*>(target) = index;
  return 0;
}

void self_destroy_release(void* user) { static_cast<SelfDestroy*>(user)->released = true; }

}  // namespace

TEST_CASE("loader: destroyed from its own worker (inside get_item), it goes once the callback returns; no abort") {
  Fixture f;
  SelfDestroy u;
  dp_dataset_callbacks cb = callbacks(&u, 200, self_destroy_item, self_destroy_release);
  int64_t shape = 1;
  dp_dataset* ds = nullptr;
  DP_REQUIRE_OK(dp_dataset_from_callbacks(f.ctx, &cb, 1, &shape, DP_I64, 0, nullptr, &ds));
  dp_loader* l = make_loader(ds, cfg_of(10, false, 2, 0, false, 4));  // 8 batches ahead: index 50 is among them
  dp_dataset_destroy(ds);  // the loader holds it: release comes when the loader is gone
  u.loader = l;
  int64_t rows = 0;
  DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
  CHECK(rows == 10);
  u.go = true;  // from here the program does not touch l: a worker destroys it at index 50
  for (int i = 0; i < 2000 && !u.released; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(u.destroyed);
  CHECK(u.released);  // the loader, its workers joined, let go of the dataset
}

TEST_CASE("loader: one dataset shared by loaders in several threads; the dataset handle may go first") {
  Fixture f;
  dp_dataset* ds = index_dataset(f.ctx, 500);
  dp_loader* ref = make_loader(ds, cfg_of(16, true, 0, 3));
  auto want = flat(epoch_batches(ref, f));
  dp_loader_destroy(ref);

  std::vector<dp_loader*> loaders;
  for (int i = 0; i < 4; ++i) loaders.push_back(make_loader(ds, cfg_of(16, true, 2, 3)));
  dp_dataset_destroy(ds);  // the loaders hold the dataset
  std::vector<std::vector<int64_t>> got(loaders.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < loaders.size(); ++i) {
    threads.emplace_back([&, i] {
      dp_context* ctx = nullptr;
      dp_tensor *x = nullptr, *y = nullptr;
      int64_t one = 1, rows = 0;
      dp_context_create(&ctx);
      dp_tensor_create(ctx, DP_F32, 1, &one, &x);
      dp_tensor_create(ctx, DP_I64, 1, &one, &y);
      for (;;) {
        if (dp_loader_next(loaders[i], x, y, &rows) != DP_OK || rows == 0) break;
        std::vector<int64_t> v(static_cast<size_t>(rows));
        dp_tensor_copy_to_host(y, v.data(), v.size() * sizeof(int64_t));
        got[i].insert(got[i].end(), v.begin(), v.end());
      }
      dp_tensor_destroy(x);
      dp_tensor_destroy(y);
      dp_context_destroy(ctx);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& g : got) CHECK(g == want);
  for (auto* l : loaders) dp_loader_destroy(l);
}
