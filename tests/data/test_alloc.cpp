// dp_loader_next allocates nothing in steady state (num_workers = 0, with
// transforms, across an epoch boundary): every operator new in the process,
// libdp's included, is counted.
#include <atomic>
#include <cstdlib>
#include <new>

#include "data_util.h"
#include "alloc_counter.h"


TEST_CASE("dp_loader_next allocates nothing in steady state (num_workers 0)") {
  TmpDir dir;
  Fixture f;
  std::string im = dir / "im.gz", lb = dir / "lb.gz";
  write_file(im, idx_images(100, 8, 8), true);
  write_file(lb, idx_labels(100), true);
  dp_dataset* ds = nullptr;
  DP_REQUIRE_OK(dp_dataset_from_idx(f.ctx, im.c_str(), lb.c_str(), &ds));
  DP_REQUIRE_OK(dp_dataset_set_transform(
      ds, R"({"random_crop": {"size": 8, "padding": 1}, "horizontal_flip": 0.5, "normalize": {"mean": [0.3], "std": [0.2]}})"));
  for (const char* cfg : {R"({"batch_size": 16, "shuffle": true, "num_workers": 0})",
                          R"({"batch_size": 16, "shuffle": false, "drop_last": true, "num_workers": 0})"}) {
    CAPTURE(cfg);
    dp_loader* l = nullptr;
    DP_REQUIRE_OK(dp_loader_create(ds, cfg, &l));
    int64_t rows = 0;
    // The first two calls trade the caller's small tensors for full-size ones.
    DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
    DP_REQUIRE_OK(dp_loader_next(l, f.x, f.y, &rows));
    long before = dp::test::allocations();
    int64_t total = 0, ends = 0;
    for (int i = 0; i < 30; ++i) {  // past two epoch boundaries
      dp_status s = dp_loader_next(l, f.x, f.y, &rows);
      REQUIRE(s == DP_OK);
      total += rows;
      ends += rows == 0;
    }
    CHECK(dp::test::allocations() - before == 0);
    CHECK(ends >= 2);
    CHECK(total > 200);
    dp_loader_destroy(l);
  }
  dp_dataset_destroy(ds);
}
