// A convolution through cuDNN's graph ("backend") API, for conv2d's 16-bit
// tensors. The legacy entry points conv2d.cu uses otherwise
// (cudnnConvolutionForward/BackwardData/BackwardFilter and their algorithm
// queries) offered bfloat16 only cuDNN's direct kernels on the H200
// (bench/RESULTS.md, run 5: dgrad2d_grouped_direct_kernel, no tensor cores);
// the tensor-core engines PyTorch reaches are found through the graph API.
//
// Experimental, off by default: DP_CUDNN_GRAPH=nchw or =nhwc (the layout of
// the 16-bit tensors) makes conv2d take this path in bf16 and fp16. Written
// on a machine without a GPU: it compiles here, and the CUDA tests run it
// (tests/cuda/test_cuda_layers.cpp) where there is one.
//
// One ConvGraph per direction and shape: its operation graph, cuDNN's
// heuristics (mode A, then the fallback list) and the first execution plan
// that builds, kept for the op's life. Computed in float32 on 16-bit x, W and
// y (cuDNN's PSEUDO configurations); engines that round inputs down further or
// reduce in lower precision are passed over, and so are nondeterministic ones
// unless allowed or nothing else builds. Nothing here synchronises: run()
// launches on the handle's stream.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda.h"

namespace dp {

enum class ConvDir { kForward, kBackwardData, kBackwardFilter };

struct ConvGraphShape {
  int64_t n = 0, c = 0, h = 0, w = 0;  // x: [n, c, h, w]
  int64_t k = 0, r = 0, s = 0;         // W: [k, c / groups, r, s]
  int64_t groups = 1;
  int64_t oh = 0, ow = 0;              // y: [n, k, oh, ow]
  int64_t pad[2] = {0, 0}, stride[2] = {1, 1}, dilation[2] = {1, 1};
  bool nhwc = false;                   // channels last: x, y as [n, h, w, c], W as [k, r, s, c / groups]
  cudnnDataType_t type = CUDNN_DATA_BFLOAT16;  // of x, W and y
};

class ConvGraph {
 public:
  // Throws DP_ERR_DEVICE naming the direction and shape when no engine of
  // cuDNN's builds a plan for it. Deterministic engines are preferred;
  // `nondeterministic_ok` (timed algorithms) takes cuDNN's order as it is.
  ConvGraph(cudnnHandle_t h, ConvDir dir, const ConvGraphShape& shape, bool nondeterministic_ok);
  ~ConvGraph();
  ConvGraph(const ConvGraph&) = delete;
  ConvGraph& operator=(const ConvGraph&) = delete;

  size_t workspace() const { return ws_; }
  // Which engine cuDNN gave (its global index), for logs and benchmarks.
  const std::string& engine() const { return engine_; }
  // Forward: y = conv(x, W). Backward data: x = the input gradient from W and
  // y (the output gradient). Backward filter: W = the weight gradient from x
  // and y. The result is written (beta 0); `ws` holds workspace() bytes.
  void run(cudnnHandle_t h, void* x, void* w, void* y, void* ws);

 private:
  std::vector<cudnnBackendDescriptor_t> owned_;  // every descriptor made, destroyed last to first
  cudnnBackendDescriptor_t plan_ = nullptr;
  cudnnBackendDescriptor_t pack_ = nullptr;  // the variant pack of the last pointers, made again when they change
  void* last_[4] = {nullptr, nullptr, nullptr, nullptr};
  size_t ws_ = 0;
  std::string engine_;
};

// Which path DP_CUDNN_GRAPH asks for: 0 none (the legacy API), 1 NCHW, 2 NHWC.
// Read when an op is made; anything else is refused with DP_ERR_INVALID_ARGUMENT.
int cudnn_graph_mode();

}  // namespace dp
