#include "backends/cuda/ops/cudnn_graph.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

// CUDNN_ATTR_OPERATIONGRAPH_HANDLE and _EXECUTION_PLAN_HANDLE are marked
// deprecated in cuDNN 9 (the handle's device is taken from elsewhere there),
// but setting them is what every cuDNN 9 release accepts.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace dp {

namespace {

constexpr int64_t kX = 1, kW = 2, kY = 3;           // the tensors' unique ids
constexpr size_t kWorkspaceCap = size_t(1) << 30;  // as conv2d.cu's

const char* dir_name(ConvDir d) {
  return d == ConvDir::kForward ? "forward" : d == ConvDir::kBackwardData ? "backward-data" : "backward-filter";
}

}  // namespace

int cudnn_graph_mode() {
  const char* v = std::getenv("DP_CUDNN_GRAPH");
  if (!v || !*v || std::strcmp(v, "0") == 0) return 0;
  if (std::strcmp(v, "nchw") == 0) return 1;
  if (std::strcmp(v, "nhwc") == 0) return 2;
  fail(DP_ERR_INVALID_ARGUMENT, std::string("DP_CUDNN_GRAPH: expected nchw, nhwc or 0, got '") + v + "'");
}

ConvGraph::ConvGraph(cudnnHandle_t h, ConvDir dir, const ConvGraphShape& sh, bool nondeterministic_ok) {
  const std::string what = std::string("conv2d on CUDA (cuDNN graph API, ") + dir_name(dir) + ")";
  auto make = [&](cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    DP_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d));
    owned_.push_back(d);
    return d;
  };
  auto set = [&](cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                 int64_t count, const void* value) { DP_CUDNN_CHECK(cudnnBackendSetAttribute(d, name, type, count, value)); };
  try {
    // Tensors: dimensions in NCHW order always; the strides say the layout.
    auto tensor = [&](int64_t uid, int64_t n, int64_t c, int64_t hh, int64_t ww) {
      cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
      const int64_t dims[4] = {n, c, hh, ww};
      int64_t strides[4];
      if (sh.nhwc) {
        strides[0] = hh * ww * c, strides[1] = 1, strides[2] = ww * c, strides[3] = c;
      } else {
        strides[0] = c * hh * ww, strides[1] = hh * ww, strides[2] = ww, strides[3] = 1;
      }
      const int64_t align = 16;  // dp's device buffers start at 256-byte boundaries
      set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &sh.type);
      set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
      set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
      set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
      set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
      DP_CUDNN_CHECK(cudnnBackendFinalize(t));
      return t;
    };
    cudnnBackendDescriptor_t x = tensor(kX, sh.n, sh.c, sh.h, sh.w);
    cudnnBackendDescriptor_t w = tensor(kW, sh.k, sh.c / sh.groups, sh.r, sh.s);  // groups: from c against W's
    cudnnBackendDescriptor_t y = tensor(kY, sh.n, sh.k, sh.oh, sh.ow);

    cudnnBackendDescriptor_t conv = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = 2;
    set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, sh.pad);
    set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, sh.pad);
    set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, sh.stride);
    set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, sh.dilation);
    DP_CUDNN_CHECK(cudnnBackendFinalize(conv));

    const float alpha = 1.f, beta = 0.f;
    cudnnBackendDescriptor_t op;
    const auto B = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    if (dir == ConvDir::kForward) {
      op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, B, 1, &x);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, B, 1, &w);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, B, 1, &y);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, B, 1, &conv);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    } else if (dir == ConvDir::kBackwardData) {
      op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, B, 1, &x);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, B, 1, &w);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, B, 1, &y);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, B, 1, &conv);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    } else {
      op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, B, 1, &x);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, B, 1, &w);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, B, 1, &y);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, B, 1, &conv);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    }
    DP_CUDNN_CHECK(cudnnBackendFinalize(op));

    cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, B, 1, &op);
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    DP_CUDNN_CHECK(cudnnBackendFinalize(graph));

    // cuDNN's candidates, best first: heuristics mode A, then its fallback
    // list; the first whose notes suit and whose plan builds is kept. Where
    // no deterministic engine builds, a second pass takes the others, as the
    // legacy path falls back to them.
    std::string passed;  // why candidates were passed over, for the error
    for (int pass = nondeterministic_ok ? 1 : 0; pass < 2; ++pass)
    for (cudnnBackendHeurMode_t heur_mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, B, 1, &graph);
      set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode);
      if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) continue;
      int64_t count = 0;
      DP_CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, B, 0, &count, nullptr));
      std::vector<cudnnBackendDescriptor_t> cfgs;
      for (int64_t i = 0; i < count; ++i) cfgs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      int64_t got = 0;
      if (count > 0)
        DP_CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, B, count, &got, cfgs.data()));
      for (int64_t i = 0; i < got && i < count; ++i) {
        cudnnBackendDescriptor_t engine = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
        int64_t one = 0;
        if (cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE, B, 1, &one, &engine) != CUDNN_STATUS_SUCCESS)
          continue;
        int64_t index = -1, notes_n = 0;
        cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &one, &index);
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
        if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &notes_n, notes) != CUDNN_STATUS_SUCCESS)
          notes_n = 0;
        const char* skip = nullptr;
        for (int64_t j = 0; j < notes_n && j < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; ++j) {
          if (notes[j] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) skip = "rounds its inputs down";
          if (notes[j] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) skip = "sums in reduced precision";
          if (notes[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC && pass == 0) skip = "nondeterministic";
        }
        if (skip) {
          passed += " engine " + std::to_string(index) + ": " + skip + ";";
          continue;
        }
        cudnnBackendDescriptor_t plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, B, 1, &cfgs[i]);
        set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
        if (cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS) {
          passed += " engine " + std::to_string(index) + ": no plan;";
          owned_.pop_back();  // the plan just made: a rejected plan's state is not kept
          cudnnBackendDestroyDescriptor(plan);
          continue;
        }
        int64_t ws = 0;
        DP_CUDNN_CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                                &one, &ws));
        if (ws < 0 || static_cast<size_t>(ws) > kWorkspaceCap) {
          passed += " engine " + std::to_string(index) + ": workspace " + std::to_string(ws) + " bytes;";
          continue;
        }
        plan_ = plan;
        ws_ = static_cast<size_t>(ws);
        engine_ = "engine " + std::to_string(index) + (heur_mode == CUDNN_HEUR_MODE_A ? "" : " (fallback list)");
        return;
      }
    }
    fail(DP_ERR_DEVICE, what + ": cuDNN built no plan for x [" + std::to_string(sh.n) + ", " + std::to_string(sh.c) +
                            ", " + std::to_string(sh.h) + ", " + std::to_string(sh.w) + "], " +
                            (sh.nhwc ? "NHWC" : "NCHW") + (passed.empty() ? std::string() : ";" + passed));
  } catch (...) {
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
    owned_.clear();
    throw;
  }
}

ConvGraph::~ConvGraph() {
  if (pack_) cudnnBackendDestroyDescriptor(pack_);
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
}

void ConvGraph::run(cudnnHandle_t h, void* x, void* w, void* y, void* ws) {
  // The variant pack names the buffers; made again only when one moved (a
  // replica's buffers persist across steps, so once per shape).
  if (!pack_ || last_[0] != x || last_[1] != w || last_[2] != y || last_[3] != ws) {
    if (pack_) cudnnBackendDestroyDescriptor(pack_);
    pack_ = nullptr;
    cudnnBackendDescriptor_t p = nullptr;
    DP_CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &p));
    const int64_t uids[3] = {kX, kW, kY};
    void* ptrs[3] = {x, w, y};
    cudnnStatus_t s = cudnnBackendSetAttribute(p, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnBackendSetAttribute(p, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnBackendSetAttribute(p, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(p);
    if (s != CUDNN_STATUS_SUCCESS) {
      cudnnBackendDestroyDescriptor(p);
      cudnn_fail(s, "conv2d on CUDA: the graph API's variant pack");
    }
    pack_ = p;
    last_[0] = x, last_[1] = w, last_[2] = y, last_[3] = ws;
  }
  DP_CUDNN_CHECK(cudnnBackendExecute(h, plan_, pack_));
}

}  // namespace dp
