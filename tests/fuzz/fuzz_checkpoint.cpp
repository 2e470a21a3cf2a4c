// Fuzz target: loading weights and checkpoints (io/checkpoint.h) into a
// fixed model (tests/io/pytorch_linear.json's: linear, batch_norm1d, relu,
// linear; cross-entropy loss) on one CPU device, with no optimizer or an sgd / adam / adamw one,
// with or without a loader position to seek to. A load that fails must
// leave the model, the optimizer and the group's step as they were.
// Input: one byte of mode (bits 0-1: optimizer none, sgd, adam, adamw;
// bit 2: seek; bits 3-4: load_checkpoint, load_weights, read_metadata, all
// three), then the file's bytes.
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "group/group.h"
#include "io/checkpoint.h"
#include "model/model.h"

using dp::fuzz::MemFile;

namespace {

const char* const kModel =
    R"({"input": {"shape": [3]}, "layers": [{"type": "linear", "out_features": 4}, {"type": "batch_norm1d"},)"
    R"( {"type": "relu"}, {"type": "linear", "out_features": 2}], "loss": {"type": "cross_entropy"}})";
const char* const kOptimizers[] = {nullptr, R"({"type": "sgd", "lr": 0.1, "momentum": 0.9})", R"({"type": "adam"})",
                                   R"({"type": "adamw"})"};

struct World {
  dp::Registry registry;
  std::unique_ptr<dp::Model> model = dp::Model::from_json(registry, kModel);
  dp::Group group{*model, "cpu:0"};
  std::unique_ptr<dp::Optimizer> opts[4];
  World() {
    for (int i = 1; i < 4; ++i) opts[i] = dp::Optimizer::from_json(kOptimizers[i], model->num_params());
  }
};

World& world() {
  static World w;
  return w;
}

// Everything a load may change.
struct Snapshot {
  std::vector<float> params, buffers;
  std::vector<std::vector<float>> state;
  int64_t steps = 0, group_step = 0;
  // Bitwise: a loaded file may hold NaNs.
  static bool same(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
  bool operator==(const Snapshot& o) const {
    if (!same(params, o.params) || !same(buffers, o.buffers) || state.size() != o.state.size()) return false;
    for (size_t i = 0; i < state.size(); ++i)
      if (!same(state[i], o.state[i])) return false;
    return steps == o.steps && group_step == o.group_step;
  }
};

Snapshot snapshot(World& w, dp::Optimizer* opt) {
  Snapshot s;
  s.params = w.model->params();
  s.buffers = w.model->buffers();
  if (opt) {
    for (const auto& st : opt->state()) s.state.push_back(*st.second);
    s.steps = opt->steps;
  }
  s.group_step = w.group.step();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  dp::fuzz::Cursor in(data, size);
  const uint8_t mode = in.u8();
  dp::Optimizer* opt = w.opts[mode & 3].get();
  const bool with_seek = mode & 4;
  const int op = (mode >> 3) & 3;
  std::vector<uint8_t> bytes = in.rest();
  MemFile file(bytes);

  if (op == 0 || op == 3) {
    Snapshot before = snapshot(w, opt);
    bool sought = false;
    std::function<void(const dp::io::LoaderPosition&)> seek = [&](const dp::io::LoaderPosition& p) {
      DP_FUZZ_CHECK(p.epoch >= 0 && p.batch >= 0);
      sought = true;
      // A loader refuses positions past its epoch's end, as this one does.
      if (p.batch > 100) dp::fail(DP_ERR_INVALID_ARGUMENT, "batch " + std::to_string(p.batch) + " is past the epoch's end");
    };
    try {
      dp::io::load_checkpoint(file.path(), w.group, opt, with_seek ? &seek : nullptr);
      DP_FUZZ_CHECK(sought == with_seek);
    } catch (const dp::Error& e) {
      dp::fuzz::expected(e);
      DP_FUZZ_CHECK(snapshot(w, opt) == before);  // a failed load changes nothing
    }
  }
  if (op == 1 || op == 3) {
    Snapshot before = snapshot(w, nullptr);
    try {
      dp::io::load_weights(*w.model, file.path());
    } catch (const dp::Error& e) {
      dp::fuzz::expected(e);
      DP_FUZZ_CHECK(snapshot(w, nullptr) == before);
    }
  }
  if (op == 2 || op == 3) {
    try {
      std::string meta = dp::io::read_metadata(file.path());
      DP_FUZZ_CHECK(!meta.empty() && meta.front() == '{' && meta.back() == '}');
    } catch (const dp::Error& e) {
      dp::fuzz::expected(e);
    }
  }
  return 0;
}
