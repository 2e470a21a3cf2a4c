// Built by check_install.sh against the installed copy only (dp.hpp, dp.h,
// libdp.so and a plugin, all found through pkg-config): trains a model that
// uses the installed swish plugin and prints the loss going down. Then, with
// DP_PLUGIN_PATH unset, the installed plugins load by bare name, from the
// program and from a model file's "plugins", found next to libdp.so.
#include <dp.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: use_dp PLUGINDIR\n");
    return 2;
  }
  try {
    dp::Context ctx;
    ctx.load_plugin(std::string(argv[1]) + "/swish.so");
    dp::Model model = dp::Model::from_json(ctx,
        R"({"seed": 1, "input": {"shape": [2]},
            "layers": [{"type": "linear", "out_features": 8}, {"type": "swish"},
                       {"type": "linear", "out_features": 2}],
            "loss": {"type": "cross_entropy"}})");
    dp::Group group(model, "cpu:0,cpu:1");
    dp::Optimizer opt(group, R"({"type": "sgd", "lr": 0.5})");
    std::vector<float> xs;
    std::vector<int64_t> ys;
    for (int i = 0; i < 32; ++i) {
      float a = static_cast<float>(i % 8) / 4.0f - 1.0f, b = static_cast<float>(i / 8) / 2.0f - 0.75f;
      xs.push_back(a);
      xs.push_back(b);
      ys.push_back(a * b > 0 ? 1 : 0);
    }
    dp::Tensor x = dp::Tensor::from_host(ctx, xs, {32, 2});
    dp::Tensor y = dp::Tensor::from_host(ctx, ys);
    float first = group.train_step(opt, x, y), last = first;
    for (int step = 0; step < 50; ++step) last = group.train_step(opt, x, y);
    std::printf("dp %s: loss %.4f -> %.4f\n", dp::version().c_str(), first, last);
    if (!(last < first)) return 1;

    // Bare names: dp's own plugin folder is searched without DP_PLUGIN_PATH.
    dp::Context bare;
    bare.load_plugin("rms_norm");
    dp::Model m2 = dp::Model::from_json(bare,
        R"({"plugins": ["swish"], "input": {"shape": [4]},
            "layers": [{"type": "rms_norm", "normalized_shape": 4}, {"type": "swish"}]})");
    std::printf("bare names rms_norm and swish (model \"plugins\") loaded from dp's plugin folder\n");
    return 0;
  } catch (const dp::Error& e) {
    std::fprintf(stderr, "%s: %s\n", e.status_name(), e.what());
    return 1;
  }
}
