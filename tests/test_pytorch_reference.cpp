// dp against PyTorch on the same weights and inputs. tests/reference/*.json
// were written by tests/reference/make_reference.py with PyTorch: the initial
// parameters, a batch, and what PyTorch computed from them (output, loss,
// gradients, a few optimizer steps, running statistics). dp must reproduce
// them through the C ABI, on one device and (for models without batch norm,
// whose statistics are per replica by design) on three.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "api_util.h"

#ifndef DP_REFERENCE_DIR
#error "DP_REFERENCE_DIR must name tests/reference"
#endif

using nlohmann::json;

namespace {

json load(const std::string& name) {
  std::ifstream f(std::string(DP_REFERENCE_DIR) + "/" + name + ".json");
  REQUIRE(f.good());
  return json::parse(f);
}

void check_case(const std::string& name, const std::string& devices) {
  CAPTURE(name);
  CAPTURE(devices);
  json ref = load(name);
  dp_context* ctx = nullptr;
  dp_model* m = nullptr;
  dp_group* g = nullptr;
  dp_optimizer* opt = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  DP_REQUIRE_OK(dp_model_from_json(ctx, ref["model"].dump().c_str(), &m));
  auto params = ref["params"].get<std::vector<float>>();
  DP_REQUIRE_OK(dp_model_set_parameters(m, params.data(), static_cast<int64_t>(params.size())));
  DP_REQUIRE_OK(dp_group_create(m, devices.c_str(), &g));
  DP_REQUIRE_OK(dp_optimizer_create(g, ref["optimizer"].dump().c_str(), &opt));

  auto input_shape = ref["input_shape"].get<std::vector<int64_t>>();
  dp_tensor* x = make_f32(ctx, ref["input"].get<std::vector<float>>(), input_shape);
  auto target_shape = ref["target_shape"].get<std::vector<int64_t>>();
  dp_tensor* t = ref["target"][0].is_number_integer() ? make_i64(ctx, ref["target"].get<std::vector<int64_t>>(), target_shape)
                                                     : make_f32(ctx, ref["target"].get<std::vector<float>>(), target_shape);

  auto losses = ref["losses"].get<std::vector<float>>();
  for (size_t step = 0; step < losses.size(); ++step) {
    float loss = 0;
    DP_REQUIRE_OK(dp_group_train_step(g, opt, x, t, &loss));
    CAPTURE(step);
    CHECK(loss == doctest::Approx(losses[step]).epsilon(1e-5));
    if (step == 0) {
      int64_t n = 0;
      DP_REQUIRE_OK(dp_model_num_parameters(m, &n));
      std::vector<float> grads(n);
      DP_REQUIRE_OK(dp_model_copy_gradients(m, grads.data(), n));
      require_close(grads, ref["grads"].get<std::vector<float>>(), 1e-4, "gradients of step 0");
    }
  }
  require_close(params_of(m), ref["params_after"].get<std::vector<float>>(), 1e-4, "parameters after the steps");
  int64_t nb = 0;
  DP_REQUIRE_OK(dp_model_num_buffers(m, &nb));
  std::vector<float> buffers(nb);
  DP_REQUIRE_OK(dp_model_copy_buffers(m, buffers.data(), nb));
  if (devices == "cpu:0") require_close(buffers, ref["buffers_after"].get<std::vector<float>>(), 1e-4, "running statistics");

  dp_tensor_destroy(x);
  dp_tensor_destroy(t);
  dp_optimizer_destroy(opt);
  dp_group_destroy(g);
  dp_model_destroy(m);
  dp_context_destroy(ctx);
}

// The forward output of the first batch (in training mode, as PyTorch's was).
void check_output(const std::string& name) {
  json ref = load(name);
  dp_context* ctx = nullptr;
  dp_model* m = nullptr;
  dp_group* g = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  DP_REQUIRE_OK(dp_model_from_json(ctx, ref["model"].dump().c_str(), &m));
  auto params = ref["params"].get<std::vector<float>>();
  DP_REQUIRE_OK(dp_model_set_parameters(m, params.data(), static_cast<int64_t>(params.size())));
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0", &g));
  dp_tensor* x = make_f32(ctx, ref["input"].get<std::vector<float>>(), ref["input_shape"].get<std::vector<int64_t>>());
  dp_tensor* out = nullptr;
  DP_REQUIRE_OK(dp_group_forward(g, x, &out));
  require_close(tensor_data(out), ref["output"].get<std::vector<float>>(), 1e-4, "output");
  dp_tensor_destroy(out);
  dp_tensor_destroy(x);
  dp_group_destroy(g);
  dp_model_destroy(m);
  dp_context_destroy(ctx);
}

}  // namespace

TEST_CASE("PyTorch reference: CNN with batch norm, max/global pooling, GELU, label smoothing, Nesterov SGD") {
  check_output("cnn_bn_sgd");
  check_case("cnn_bn_sgd", "cpu:0");
}

TEST_CASE("PyTorch reference: MLP, tanh-GELU, batch norm without affine, MSE, Adam with weight decay") {
  check_output("mlp_mse_adam");
  check_case("mlp_mse_adam", "cpu:0");
}

TEST_CASE("PyTorch reference: residual DAG, dilated grouped conv, concat, avg pool, AdamW; on 1 and 3 devices") {
  check_output("dag_adamw");
  check_case("dag_adamw", "cpu:0");
  check_case("dag_adamw", "cpu:0,cpu:1,cpu:2");
}

TEST_CASE("PyTorch reference: log_softmax and nll with class weights, SGD with momentum; on 1 and 3 devices") {
  check_output("mlp_nll_sgd");
  check_case("mlp_nll_sgd", "cpu:0");
  check_case("mlp_nll_sgd", "cpu:0,cpu:1,cpu:2");
}

TEST_CASE("PyTorch reference: multi-label bce_with_logits with weight and pos_weight, AdamW; on 1 and 2 devices") {
  check_output("mlp_bce_logits_adamw");
  check_case("mlp_bce_logits_adamw", "cpu:0");
  check_case("mlp_bce_logits_adamw", "cpu:0,cpu:1");
}

TEST_CASE("PyTorch reference: huber (both pieces), plain SGD; on 1 and 4 devices") {
  check_output("mlp_huber_sgd");
  check_case("mlp_huber_sgd", "cpu:0");
  check_case("mlp_huber_sgd", "cpu:0,cpu:1,cpu:2,cpu:3");
}

TEST_CASE("PyTorch reference: layer_norm over two trailing dims, Adam; on 1 and 3 devices") {
  check_output("mlp_layer_norm_adam");
  check_case("mlp_layer_norm_adam", "cpu:0");
  check_case("mlp_layer_norm_adam", "cpu:0,cpu:1,cpu:2");
}
