// One device's copy of the model: activations, their gradients, per-layer
// scratch, and its own parameter-gradient buffer. Everything here persists
// across steps and only grows, so a step at a batch size seen before allocates
// nothing. The graph walk (which layer runs, where gradients of shared inputs
// are summed) is the same on every device; an Executor says how a layer runs
// on this one: on the CPU, the Layer itself (backends/cpu/engine.cpp); on a
// GPU, its CUDA op (backends/cuda/replica.cpp).
#pragma once
#include <memory>
#include <vector>

#include "model/model.h"

namespace dp {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual void forward(size_t node, const RunCtx& ctx, LayerIO& io) = 0;
  virtual void backward(size_t node, const RunCtx& ctx, LayerIO& io) = 0;
  // dst[0, n) += src[0, n) and dst[0, n) = 0, in this device's memory.
  virtual void add(float* dst, const float* src, int64_t n) = 0;
  virtual void zero(float* dst, int64_t n) = 0;
  // Layers add into their gradients, so backward zeroes them first: all at
  // once (one call: a GPU's choice), or each layer's just before it runs
  // (while they are about to be in cache: a CPU's).
  virtual bool zero_grads_by_layer() const { return false; }
  // Node `node`'s backward is done: gradients of parameters at offsets >=
  // its param_offset are final (layers run backward in reverse order).
  virtual void backward_done(size_t node) { (void)node; }
  // Whether backward_final is wanted (LayerIO::grads_final is then set).
  virtual bool wants_partial() const { return false; }
  // During node `node`'s backward: its gradients from param_offset + from
  // on are final (Layer::grad_splits).
  virtual void backward_final(size_t node, int64_t from) { (void)node, (void)from; }
};

class Replica {
 public:
  // A replica whose layers run through `exec`, with every tensor from
  // `alloc` (null: host memory); set_weights() says where its parameters
  // and buffers are.
  Replica(const Model& model, Executor* exec, Allocator* alloc);

  void set_weights(const float* params, const float* buffers) {
    params_ = params;
    buffers_ = buffers;
  }

  // Runs the layers on `input` (this replica's rows of the batch).
  void forward(const RunCtx& ctx, const Tensor& input);
  // Back-propagates `grad_output` (rows of the output's gradient) and writes
  // this replica's parameter gradients into grads() (overwritten, not added).
  void backward(const RunCtx& ctx, const Tensor& grad_output);
  const Tensor& output() const { return acts_.back(); }
  Tensor& loss_grad() { return loss_grad_; }
  float* grads() { return grads_at_; }
  // Where backward writes the parameter gradients: `grads` (as many floats
  // as the model has parameters, in this replica's memory: the model's own,
  // say), or null for this replica's buffer.
  void set_grads(float* grads) { grads_at_ = grads ? grads : grads_.f32(); }
  float* stats(const Node& n) { return all_stats() + n.stats_offset; }
  float* all_stats() { return stats_.f32(); }  // every layer's, model.stats_total floats
 private:
  // Points io_ at node k's tensors (io_ is reused: no allocation per layer).
  void io_for(size_t k);
  // LayerIO::grads_final during node node_'s backward.
  static void final_from(void* self, int64_t from);

  const Model& model_;
  Executor* exec_ = nullptr;
  const float* params_ = nullptr;
  const float* buffers_ = nullptr;
  std::vector<Tensor> acts_, act_grads_;
  std::vector<std::vector<Tensor>> scratch_;
  std::vector<std::vector<Tensor>> extra_grads_;  // for inputs that feed several layers
  std::vector<char> grad_ready_;
  Tensor grads_, stats_;
  float* grads_at_ = nullptr;  // grads_, or set_grads()
  Tensor input_, loss_grad_;
  LayerIO io_;
  size_t node_ = 0;  // the node whose backward runs
};

}  // namespace dp
