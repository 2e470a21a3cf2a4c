// dp.hpp through the subproject's dependency.
#include <dp.hpp>

#include <cstdio>

int main() {
  dp::Context ctx;
  dp::Model model = dp::Model::from_json(ctx, R"({"input": {"shape": [3]},
      "layers": [{"type": "linear", "out_features": 2}], "loss": {"type": "mse"}})");
  std::printf("dp %s: %lld parameters\n", dp::version().c_str(), static_cast<long long>(model.num_parameters()));
  return model.num_parameters() == 8 ? 0 : 1;
}
