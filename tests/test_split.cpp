// The split rule, for every B in 1..64 on 1..8 devices: torch.chunk's
// (ceil(B/n) per part, fewer parts when B is small) and the balanced option;
// checked on the internal function and through a real group.
#include <doctest/doctest.h>

#include "api_util.h"
#include "group/split.h"

// torch.chunk, written from its definition: parts of ceil(B/n) rows while rows remain.
static std::vector<int64_t> chunk_rule(int64_t b, int n) {
  std::vector<int64_t> out;
  int64_t c = (b + n - 1) / n;
  for (int64_t start = 0; start < b; start += c) out.push_back(std::min(c, b - start));
  return out;
}

TEST_CASE("chunk split: every B in 1..64 on 1..8 devices") {
  std::vector<int64_t> sizes;
  for (int n = 1; n <= 8; ++n)
    for (int64_t b = 1; b <= 64; ++b) {
      dp::split_batch(b, n, dp::SplitMode::kChunk, sizes);
      CAPTURE(n);
      CAPTURE(b);
      CHECK(sizes == chunk_rule(b, n));
    }
  dp::split_batch(30, 8, dp::SplitMode::kChunk, sizes);
  CHECK(sizes == std::vector<int64_t>{4, 4, 4, 4, 4, 4, 4, 2});
  dp::split_batch(10, 8, dp::SplitMode::kChunk, sizes);
  CHECK(sizes == std::vector<int64_t>{2, 2, 2, 2, 2});
  dp::split_batch(30, 3, dp::SplitMode::kChunk, sizes);
  CHECK(sizes == std::vector<int64_t>{10, 10, 10});
  dp::split_batch(10, 2, dp::SplitMode::kChunk, sizes);
  CHECK(sizes == std::vector<int64_t>{5, 5});
}

TEST_CASE("balanced split: sizes differ by at most one, larger first") {
  std::vector<int64_t> sizes;
  dp::split_batch(30, 8, dp::SplitMode::kBalanced, sizes);
  CHECK(sizes == std::vector<int64_t>{4, 4, 4, 4, 4, 4, 3, 3});
  for (int n = 1; n <= 8; ++n)
    for (int64_t b = 1; b <= 64; ++b) {
      dp::split_batch(b, n, dp::SplitMode::kBalanced, sizes);
      int64_t sum = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        sum += sizes[i];
        CHECK(sizes[i] >= 1);
        if (i) CHECK((sizes[i - 1] == sizes[i] || sizes[i - 1] == sizes[i] + 1));
      }
      CHECK(sum == b);
      CHECK(sizes.size() == static_cast<size_t>(std::min<int64_t>(b, n)));
    }
}

TEST_CASE("a group reports the split it ran (dp_group_last_split)") {
  dp_context* ctx = nullptr;
  dp_model* m = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  DP_REQUIRE_OK(dp_model_from_json(ctx, R"({"input": {"shape": [5]}, "layers": [{"type": "linear", "out_features": 2}]})", &m));
  for (int n = 1; n <= 8; ++n) {
    dp_group* g = nullptr;
    DP_REQUIRE_OK(dp_group_create(m, cpu_devices(n).c_str(), &g));
    for (int64_t b = 1; b <= 64; ++b) {
      dp_tensor* x = make_f32(ctx, std::vector<float>(static_cast<size_t>(b * 5), 1.0f), {b, 5});
      dp_tensor* out = nullptr;
      DP_REQUIRE_OK(dp_group_forward(g, x, &out));
      int64_t sizes[8];
      int count = 0;
      DP_REQUIRE_OK(dp_group_last_split(g, sizes, 8, &count));
      CAPTURE(n);
      CAPTURE(b);
      CHECK(std::vector<int64_t>(sizes, sizes + count) == chunk_rule(b, n));
      CHECK(shape_of(out) == std::vector<int64_t>{b, 2});
      dp_tensor_destroy(out);
      dp_tensor_destroy(x);
    }
    dp_group_destroy(g);
  }
  dp_model_destroy(m);
  dp_context_destroy(ctx);
}

TEST_CASE("a process's share of a global batch: consecutive rows, its devices' parts, every row once") {
  for (dp::SplitMode mode : {dp::SplitMode::kChunk, dp::SplitMode::kBalanced}) {
    for (int64_t b = 1; b <= 40; ++b) {
      // 3 processes of 1, 2 and 1 devices: their shares tile [0, b) in rank order.
      const int devices[] = {1, 2, 1};
      std::vector<int64_t> parts;
      dp::split_batch(b, 4, mode, parts);
      int64_t next = 0;
      for (int r = 0, first = 0; r < 3; first += devices[r], ++r) {
        int64_t at = -1, rows = -1;
        dp::split_share(b, 4, mode, first, devices[r], &at, &rows);
        int64_t want = 0;
        for (int d = first; d < first + devices[r]; ++d) want += d < static_cast<int>(parts.size()) ? parts[static_cast<size_t>(d)] : 0;
        CAPTURE(b);
        CAPTURE(r);
        CHECK(at == next);
        CHECK(rows == want);
        next += rows;
      }
      CHECK(next == b);
    }
  }
}
