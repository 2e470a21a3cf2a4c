// Built by check_install.sh against the installed copy only (dp.hpp, dp.h,
// libdp.so and a plugin, all found through pkg-config): trains a model that
// uses the installed swish plugin and prints the loss going down.
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
    return last < first ? 0 : 1;
  } catch (const dp::Error& e) {
    std::fprintf(stderr, "%s: %s\n", e.status_name(), e.what());
    return 1;
  }
}
