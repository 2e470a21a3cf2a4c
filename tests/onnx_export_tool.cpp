// onnx_export_tool MODEL.json WEIGHTS OUT.onnx [OPSET]: loads a model and its
// weights (a safetensors weights file or a dp checkpoint) with dp's internal
// API and writes it as ONNX (io/onnx.h). tests/check_onnx.py runs it; `dp
// export --onnx` and dp_model_export_onnx do the same through the C ABI.
// Exit codes: 0 written, 1 a dp error (its status and message on stderr), 2 usage.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/onnx.h"
#include "layers/registry.h"
#include "model/model.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL.json WEIGHTS OUT.onnx [OPSET]\n", argv[0]);
    return 2;
  }
  try {
    std::ifstream f(argv[1], std::ios::binary);
    if (!f) dp::fail(DP_ERR_IO, std::string(argv[1]) + ": cannot open");
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    dp::Registry registry;
    auto model = dp::Model::from_json(registry, text);
    dp::io::load_weights(*model, argv[2]);
    const int opset = argc == 5 ? std::atoi(argv[4]) : dp::io::kOnnxOpsetDefault;
    dp::io::export_onnx(*model, argv[3], opset);
  } catch (const dp::Error& e) {
    std::fprintf(stderr, "onnx_export_tool: %s: %s\n", dp_status_name(e.status()), e.what());
    return 1;
  }
  return 0;
}
