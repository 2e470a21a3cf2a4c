// Export of a model to ONNX (https://onnx.ai): the graph with its current
// weights, in evaluation form: batch norm with its running statistics (or,
// with track_running_stats false, the batch statistics it uses in
// evaluation too), dropout removed. Input "input" [N, ...input shape] and
// output "output" [N, ...output shape], float32, with a symbolic batch
// dimension "N"; initializers take the state_dict names ("0.weight",
// "1.running_mean"), and the model's JSON rides along in the metadata
// property "dp.model". The graph is checked with ONNX's checker and strict
// shape inference (each layer's output shape must be dp's) before it is
// returned or written.
//
// Built with ONNX's protobuf classes (Debian's libonnx-dev; io/meson.build);
// without them, io/onnx_stub.cpp stands in and every export fails with
// DP_ERR_IO ("built without ONNX support").
#pragma once
#include <string>

#include "model/model.h"

namespace dp::io {

// The opsets the exporter writes: 17 is the newest that libonnx 1.12 (Debian
// 12) checks; 13 is the first with today's Softmax and Pad, and 18 moved
// ReduceMean's axes from an attribute to an input.
constexpr int kOnnxOpsetMin = 13, kOnnxOpsetMax = 17, kOnnxOpsetDefault = 17;

// True when dp was built with ONNX support.
bool onnx_supported();

// The serialized ModelProto, checked. Throws dp::Error: DP_ERR_MODEL for a
// layer type with no ONNX mapping (a plugin's), naming the layer, its type
// and the types that export; DP_ERR_MODEL for weights over protobuf's 2 GiB
// limit; DP_ERR_INVALID_ARGUMENT for an opset outside [13, 17]; DP_ERR_IO
// when built without ONNX support; DP_ERR_INTERNAL when the graph fails
// ONNX's checker or a shape differs from dp's (a bug in the exporter).
std::string onnx_model_bytes(const Model& model, int opset = kOnnxOpsetDefault);

// Writes onnx_model_bytes(model, opset) to path atomically (a temporary file
// next to it, fsynced, renamed over it). Errors: those above, and DP_ERR_IO
// naming the path and the system's reason; path is untouched on any error.
void export_onnx(const Model& model, const std::string& path, int opset = kOnnxOpsetDefault);

}  // namespace dp::io
