// Host and device copies of the parameters (model/model.h): every C ABI call
// that reads the model sees the newest values a device copy holds, and every
// call that writes it marks the device copy stale. A stand-in device copy
// plays the GPU engine, so this runs without a GPU; it fails if any reader
// skips the sync or any writer skips the version bump.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "capi/handles.h"
#include "dp.h"

namespace {

const char* kModel = R"({"seed": 1, "input": {"shape": [3]},
  "layers": [{"type": "linear", "out_features": 4}, {"type": "batch_norm1d"}, {"type": "relu"},
             {"type": "linear", "out_features": 2}],
  "loss": {"type": "cross_entropy"}})";

// What a GPU engine does for the model, with host vectors for device memory.
class FakeDevice final : public dp::DeviceCopy {
 public:
  explicit FakeDevice(dp::Model& m) : m_(m) {
    m.set_device_copy(this);
    loaded_ = m.host_version();
  }
  ~FakeDevice() override { m_.set_device_copy(nullptr); }
  // The device trained: its values are now `shift` away from the host's.
  void train(float shift) {
    params = host_params(m_);
    grads = host_grads(m_);
    for (float& v : params) v += shift;
    for (float& v : grads) v -= shift;
    newer_ = true;
  }
  void to_host() override {
    if (!newer_) return;
    std::copy(params.begin(), params.end(), host_params(m_).begin());
    std::copy(grads.begin(), grads.end(), host_grads(m_).begin());
    newer_ = false;
  }
  // Whether the host wrote since the device last loaded; then "loads".
  bool stale_then_reload() {
    const bool stale = loaded_ != m_.host_version();
    loaded_ = m_.host_version();
    return stale;
  }
  std::vector<float> params, grads;

 private:
  dp::Model& m_;
  uint64_t loaded_ = 0;
  bool newer_ = false;
};

std::vector<float> params_via_abi(dp_model* m) {
  int64_t n = 0;
  REQUIRE(dp_model_num_parameters(m, &n) == DP_OK);
  std::vector<float> v(static_cast<size_t>(n));
  REQUIRE(dp_model_copy_parameters(m, v.data(), n) == DP_OK);
  return v;
}

struct Fixture {
  Fixture() {
    REQUIRE(dp_context_create(&ctx) == DP_OK);
    REQUIRE(dp_model_from_json(ctx, kModel, &model) == DP_OK);
    REQUIRE(dp_model_from_json(ctx, kModel, &other) == DP_OK);
    REQUIRE(dp_group_create(model, "cpu:0,cpu:1", &group) == DP_OK);
    REQUIRE(dp_optimizer_create(group, R"({"type": "sgd", "lr": 0})", &opt) == DP_OK);
    device = std::make_unique<FakeDevice>(*model->model);
  }
  ~Fixture() {
    device.reset();
    dp_optimizer_destroy(opt);
    dp_group_destroy(group);
    dp_model_destroy(model);
    dp_model_destroy(other);
    dp_context_destroy(ctx);
    std::remove(path.c_str());
  }
  dp_context* ctx = nullptr;
  dp_model *model = nullptr, *other = nullptr;
  dp_group* group = nullptr;
  dp_optimizer* opt = nullptr;
  std::unique_ptr<FakeDevice> device;
  std::string path = "test_model_sync.safetensors";
};

}  // namespace

TEST_CASE("readers see the device's newest parameters and gradients") {
  Fixture f;
  f.device->train(0.5f);
  CHECK(params_via_abi(f.model) == f.device->params);

  f.device->train(0.25f);
  std::vector<float> g(f.device->grads.size());
  REQUIRE(dp_model_copy_gradients(f.model, g.data(), static_cast<int64_t>(g.size())) == DP_OK);
  CHECK(g == f.device->grads);

  f.device->train(1.0f);
  REQUIRE(dp_model_save_safetensors(f.model, f.path.c_str()) == DP_OK);
  REQUIRE(dp_model_load_safetensors(f.other, f.path.c_str()) == DP_OK);
  CHECK(params_via_abi(f.other) == f.device->params);

  f.device->train(2.0f);
  REQUIRE(dp_checkpoint_save(f.path.c_str(), f.group, f.opt, nullptr, nullptr) == DP_OK);
  REQUIRE(dp_model_load_safetensors(f.other, f.path.c_str()) == DP_OK);
  CHECK(params_via_abi(f.other) == f.device->params);

  f.device->train(3.0f);  // the weights for PyTorch: the same tensors, plus num_batches_tracked
  REQUIRE(dp_model_save_weights(f.model, f.path.c_str()) == DP_OK);
  REQUIRE(dp_model_load_safetensors(f.other, f.path.c_str()) == DP_OK);
  CHECK(params_via_abi(f.other) == f.device->params);

  // ONNX: the initializers hold the raw floats, so the first layer's weight
  // (the first 12 parameters) appears in the file as the device holds it.
  f.device->train(4.0f);
  const dp_status st = dp_model_export_onnx(f.model, f.path.c_str());
  if (st == DP_ERR_IO && std::string(dp_last_error()).find("without ONNX") != std::string::npos) {
    MESSAGE("this libdp has no ONNX support: its export is not checked");
  } else {
    REQUIRE(st == DP_OK);
    std::string file;
    if (FILE* fp = std::fopen(f.path.c_str(), "rb")) {
      char buf[4096];
      for (size_t got; (got = std::fread(buf, 1, sizeof buf, fp)) > 0;) file.append(buf, got);
      std::fclose(fp);
    }
    const std::string weight(reinterpret_cast<const char*>(f.device->params.data()), 12 * sizeof(float));
    CHECK(file.find(weight) != std::string::npos);
  }
}

TEST_CASE("writers mark the device copy stale") {
  Fixture f;
  CHECK(!f.device->stale_then_reload());
  std::vector<float> p = params_via_abi(f.model);
  REQUIRE(dp_model_set_parameters(f.model, p.data(), static_cast<int64_t>(p.size())) == DP_OK);
  CHECK(f.device->stale_then_reload());

  REQUIRE(dp_model_save_safetensors(f.model, f.path.c_str()) == DP_OK);
  CHECK(!f.device->stale_then_reload());  // reading is not writing
  REQUIRE(dp_model_load_safetensors(f.model, f.path.c_str()) == DP_OK);
  CHECK(f.device->stale_then_reload());

  REQUIRE(dp_checkpoint_save(f.path.c_str(), f.group, f.opt, nullptr, nullptr) == DP_OK);
  CHECK(!f.device->stale_then_reload());
  REQUIRE(dp_checkpoint_load(f.path.c_str(), f.group, f.opt, nullptr) == DP_OK);
  CHECK(f.device->stale_then_reload());
}

TEST_CASE("a CPU group trains from the device's newest parameters, and its step marks the device copy stale") {
  Fixture f;
  f.device->train(0.75f);
  int64_t xs[2] = {4, 3}, ys[1] = {4};
  float x[12] = {0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.6f, 0.7f, -0.8f, 0.9f, 1.0f, 1.1f, 1.2f};
  int64_t y[4] = {0, 1, 1, 0};
  dp_tensor *tx = nullptr, *ty = nullptr;
  REQUIRE(dp_tensor_from_host(f.ctx, DP_F32, x, 2, xs, &tx) == DP_OK);
  REQUIRE(dp_tensor_from_host(f.ctx, DP_I64, y, 1, ys, &ty) == DP_OK);
  float loss = 0;
  f.device->stale_then_reload();
  REQUIRE(dp_group_train_step(f.group, f.opt, tx, ty, &loss) == DP_OK);
  CHECK(f.device->stale_then_reload());
  // lr 0: the step left the parameters as the device had them.
  CHECK(params_via_abi(f.model) == f.device->params);
  dp_tensor_destroy(tx);
  dp_tensor_destroy(ty);
}
