// Datasets from memory: arrays (copied or borrowed) and the caller's
// callbacks, including one that fails.
#include <atomic>
#include <cstring>
#include <mutex>

#include "data_util.h"

TEST_CASE("arrays: a copy ignores later writes, a borrow sees them") {
  Fixture f;
  for (int borrow : {0, 1}) {
    CAPTURE(borrow);
    std::vector<float> in = {1, 2, 3, 4, 5, 6};  // 3 samples of [2]
    std::vector<float> tg = {10, 20, 30};        // float targets of shape [1]
    int64_t shape = 2, tshape = 1;
    dp_dataset* ds = nullptr;
    DP_REQUIRE_OK(dp_dataset_from_arrays(f.ctx, in.data(), 1, &shape, 3, DP_F32, tg.data(), 1, &tshape, borrow, &ds));
    in[2] = 99;
    tg[1] = -1;
    dp_loader* l = nullptr;
    DP_REQUIRE_OK(dp_loader_create(ds, R"({"batch_size": 3})", &l));
    int64_t rows = 0;
    DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
    CHECK(rows == 3);
    CHECK(shape_of(f.x) == std::vector<int64_t>{3, 2});
    CHECK(shape_of(f.y) == std::vector<int64_t>{3, 1});
    dp_dtype dt = DP_I64;
    DP_REQUIRE_OK(dp_tensor_dtype(f.y, &dt));
    CHECK(dt == DP_F32);
    auto x = contents<float>(f.x);
    auto y = contents<float>(f.y);
    CHECK(x[2] == (borrow ? 99.0f : 3.0f));
    CHECK(y[1] == (borrow ? -1.0f : 20.0f));
    CHECK(x[5] == 6.0f);
    dp_loader_destroy(l);
    dp_dataset_destroy(ds);
  }
}

TEST_CASE("arrays: bad arguments leave *out untouched") {
  Fixture f;
  float in[4] = {};
  int64_t tg[2] = {};
  int64_t shape = 2, neg = -1;
  dp_dataset* ds = nullptr;
  CHECK(dp_dataset_from_arrays(f.ctx, in, 1, &neg, 2, DP_I64, tg, 0, nullptr, 0, &ds) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_dataset_from_arrays(f.ctx, in, 1, &shape, -1, DP_I64, tg, 0, nullptr, 0, &ds) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_dataset_from_arrays(f.ctx, nullptr, 1, &shape, 2, DP_I64, tg, 0, nullptr, 0, &ds) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_dataset_from_arrays(f.ctx, in, 1, &shape, 2, DP_I64, nullptr, 0, nullptr, 0, &ds) == DP_ERR_INVALID_ARGUMENT);
  CHECK_FAILS(dp_dataset_from_arrays(f.ctx, in, 1, &shape, 2, DP_I64, tg, 1, &shape, 0, &ds), DP_ERR_INVALID_ARGUMENT,
              "target_ndim must be 0");
  CHECK(dp_dataset_from_arrays(f.ctx, in, 1, &shape, 2, DP_I64, tg, 0, nullptr, 2, &ds) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_dataset_from_arrays(f.ctx, in, 9, &shape, 2, DP_I64, tg, 0, nullptr, 0, &ds) == DP_ERR_INVALID_ARGUMENT);
  // A sample shape whose element count overflows (it wrapped to 0, and NULL
  // inputs were then accepted): a shape error, naming the call.
  const int64_t wraps[2] = {int64_t{1} << 32, int64_t{1} << 32};
  CHECK_FAILS(dp_dataset_from_arrays(f.ctx, nullptr, 2, wraps, 2, DP_I64, tg, 0, nullptr, 0, &ds), DP_ERR_SHAPE,
              "dp_dataset_from_arrays: sample", "[4294967296, 4294967296] has too many elements");
  // count times the sample size past int64: a shape error; a copy larger than
  // the machine: DP_ERR_OUT_OF_MEMORY naming the bytes, before allocating (it
  // was DP_ERR_INTERNAL "cannot create std::vector larger than max_size()").
  CHECK_FAILS(dp_dataset_from_arrays(f.ctx, in, 1, &shape, int64_t{1} << 62, DP_I64, tg, 0, nullptr, 1, &ds), DP_ERR_SHAPE,
              "dp_dataset_from_arrays: count times the sample size");
  CHECK_FAILS(dp_dataset_from_arrays(f.ctx, in, 1, &shape, int64_t{1} << 57, DP_I64, tg, 0, nullptr, 0, &ds),
              DP_ERR_OUT_OF_MEMORY, "dp_dataset_from_arrays: a copy of 144115188075855872 samples of [2]", "2.3 EB",
              "nothing was allocated");
  CHECK(ds == nullptr);
  dp_dataset_destroy(nullptr);
  dp_loader_destroy(nullptr);
}

namespace {

// get_item: input = (index, index + 0.5), target = index * 10; fails with a
// message at the indices in `fail_at`; counts calls; release sets a flag.
struct CbState {
  std::atomic<int64_t> fail_at{-1};  // workers read it concurrently
  std::atomic<int> calls{0};
  bool released = false;
};

int get_item(void* user, int64_t index, float* input, void* target, char* error, size_t cap) {
  auto* s = static_cast<CbState*>(user);
  ++s->calls;
  if (s->fail_at.load() == index) {
    std::snprintf(error, cap, "disk on fire");
    return 1;
  }
  input[0] = static_cast<float>(index);
  input[1] = static_cast<float>(index) + 0.5f;
  *static_cast<int64_t*>(target) = index * 10;
  return 0;
}

void release(void* user) { static_cast<CbState*>(user)->released = true; }

dp_dataset* callback_dataset(Fixture& f, CbState& st, int64_t n) {
  dp_dataset_callbacks cb = callbacks(&st, n, get_item, release);
  int64_t shape = 2;
  dp_dataset* ds = nullptr;
  DP_REQUIRE_OK(dp_dataset_from_callbacks(f.ctx, &cb, 1, &shape, DP_I64, 0, nullptr, &ds));
  return ds;
}

}  // namespace

TEST_CASE("callbacks: samples come from get_item; release runs at destroy") {
  Fixture f;
  CbState st;
  dp_dataset* ds = callback_dataset(f, st, 7);
  int64_t n = 0;
  DP_REQUIRE_OK(dp_dataset_length(ds, &n));
  CHECK(n == 7);
  dp_loader* l = nullptr;
  DP_REQUIRE_OK(dp_loader_create(ds, R"({"batch_size": 4, "num_workers": 2})", &l));
  auto b = epoch_batches(l, f);
  REQUIRE(b.size() == 2);
  CHECK(b[0] == std::vector<int64_t>{0, 10, 20, 30});
  CHECK(b[1] == std::vector<int64_t>{40, 50, 60});
  auto x = contents<float>(f.x);  // the end-of-epoch call left 0 rows
  CHECK(x.empty());
  dp_loader_destroy(l);
  CHECK(!st.released);
  dp_dataset_destroy(ds);
  CHECK(st.released);

  // A failed creation does not call release: user stays the caller's (dp.hpp's from_function frees it then).
  CbState refused;
  dp_dataset_callbacks cb = callbacks(&refused, 3, get_item, release);
  int64_t bad_shape = -2;
  dp_dataset* none = nullptr;
  CHECK(dp_dataset_from_callbacks(f.ctx, &cb, 1, &bad_shape, DP_I64, 0, nullptr, &none) != DP_OK);
  CHECK(none == nullptr);
  CHECK(!refused.released);
}

TEST_CASE("callbacks: a failing get_item fails that batch's dp_loader_next, then the loader continues") {
  for (int workers : {0, 1, 2}) {
    CAPTURE(workers);
    Fixture f;
    CbState st;
    st.fail_at = 12;
    dp_dataset* ds = callback_dataset(f, st, 20);
    dp_loader* l = nullptr;
    std::string cfg = R"({"batch_size": 5, "num_workers": )" + std::to_string(workers) + "}";
    DP_REQUIRE_OK(dp_loader_create(ds, cfg.c_str(), &l));
    CHECK(next_targets(l, f) == std::vector<int64_t>{0, 10, 20, 30, 40});
    CHECK(next_targets(l, f) == std::vector<int64_t>{50, 60, 70, 80, 90});
    auto before_x = contents<float>(f.x);
    int64_t rows = -7;
    CHECK_FAILS(dp_loader_next(l, f.x, f.y, &rows), DP_ERR_INVALID_ARGUMENT,
                "dataset callback failed at index 12: disk on fire");
    CHECK(rows == -7);
    CHECK(contents<float>(f.x) == before_x);  // the caller's tensors are untouched
    int64_t e = -1, bt = -1;
    DP_REQUIRE_OK(dp_loader_position(l, &e, &bt));
    CHECK(e == 0);
    CHECK(bt == 3);
    CHECK(next_targets(l, f) == std::vector<int64_t>{150, 160, 170, 180, 190});
    CHECK(next_targets(l, f).empty());
    // The next epoch fails at the same batch again (a deterministic failure),
    // and a seek back retries it.
    CHECK(next_targets(l, f).size() == 5);
    CHECK(next_targets(l, f).size() == 5);
    CHECK(dp_loader_next(l, f.x, f.y, &rows) == DP_ERR_INVALID_ARGUMENT);
    st.fail_at = -1;
    DP_REQUIRE_OK(dp_loader_seek(l, 1, 2));
    CHECK(next_targets(l, f) == std::vector<int64_t>{100, 110, 120, 130, 140});
    dp_loader_destroy(l);
    dp_dataset_destroy(ds);
  }
}

TEST_CASE("callbacks: bad structs") {
  Fixture f;
  CbState st;
  dp_dataset_callbacks cb = callbacks(&st, 3, get_item);
  cb.struct_size = sizeof cb - 1;
  int64_t shape = 2;
  dp_dataset* ds = nullptr;
  CHECK_FAILS(dp_dataset_from_callbacks(f.ctx, &cb, 1, &shape, DP_I64, 0, nullptr, &ds), DP_ERR_INVALID_ARGUMENT,
              "struct_size");
  cb.struct_size = sizeof cb;
  cb.get_item = nullptr;
  CHECK(dp_dataset_from_callbacks(f.ctx, &cb, 1, &shape, DP_I64, 0, nullptr, &ds) == DP_ERR_INVALID_ARGUMENT);
  cb.get_item = get_item;
  cb.length = -1;
  CHECK(dp_dataset_from_callbacks(f.ctx, &cb, 1, &shape, DP_I64, 0, nullptr, &ds) == DP_ERR_INVALID_ARGUMENT);
  cb.length = 3;
  const int64_t wraps[2] = {int64_t{1} << 32, int64_t{1} << 32};
  CHECK_FAILS(dp_dataset_from_callbacks(f.ctx, &cb, 2, wraps, DP_I64, 0, nullptr, &ds), DP_ERR_SHAPE,
              "dp_dataset_from_callbacks: sample", "too many elements");
  CHECK_FAILS(dp_dataset_from_callbacks(f.ctx, &cb, 1, &shape, DP_F32, 2, wraps, &ds), DP_ERR_SHAPE,
              "dp_dataset_from_callbacks: target", "too many elements");
  CHECK(ds == nullptr);
}
