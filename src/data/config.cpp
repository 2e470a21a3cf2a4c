// The loader's JSON config, with PyTorch's DataLoader defaults:
// {"batch_size": 1, "shuffle": false, "drop_last": false, "num_workers": 0,
//  "prefetch_factor" (or "prefetch"): 2, "seed": 0, "pin_memory": false}
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/loader.h"
#include "core/args.h"

namespace dp {

using nlohmann::json;

// More threads than this is a mistake, not a configuration.
static constexpr int64_t kMaxWorkers = 256;
static constexpr int64_t kMaxPrefetch = 1024;

LoaderConfig LoaderConfig::from_json(const std::string& text) {
  const json doc = parse_config(text, "loader");
  Args a(doc, "");
  LoaderConfig c;
  c.batch_size = a.integer("batch_size", 1, 1);
  c.shuffle = a.boolean("shuffle", false);
  c.drop_last = a.boolean("drop_last", false);
  int64_t workers = a.integer("num_workers", 0, 0);
  if (workers > kMaxWorkers)
    fail(DP_ERR_MODEL, a.path_of("num_workers") + ": expected at most " + std::to_string(kMaxWorkers) + ", got " + std::to_string(workers));
  // "prefetch_factor" is PyTorch's name for it (batches ahead per worker).
  const char* key = a.has("prefetch_factor") ? "prefetch_factor" : "prefetch";
  if (a.has("prefetch_factor") && a.has("prefetch"))
    fail(DP_ERR_MODEL, "/prefetch_factor: give prefetch or prefetch_factor (the same setting), not both");
  int64_t prefetch = a.integer(key, 2, 1);
  if (prefetch > kMaxPrefetch)
    fail(DP_ERR_MODEL, a.path_of(key) + ": expected at most " + std::to_string(kMaxPrefetch) + ", got " + std::to_string(prefetch));
  c.num_workers = static_cast<int>(workers);
  c.prefetch = static_cast<int>(prefetch);
  c.seed = static_cast<uint64_t>(a.integer("seed", 0, 0));
  c.pin_memory = a.boolean("pin_memory", false);
  a.finish("a loader");
  return c;
}

}  // namespace dp
