// One device's copy of the model: activations, their gradients, per-layer
// scratch, and its own parameter-gradient buffer. Parameters and buffers are
// the model's own (CPU replicas share them). Everything here persists across
// steps and only grows, so a step at a batch size seen before allocates nothing.
#pragma once
#include <vector>

#include "model/model.h"

namespace dp {

class Replica {
 public:
  Replica(const Model& model, int threads);

  // Runs the layers on `input` (this replica's rows of the batch).
  void forward(const RunCtx& ctx, const Tensor& input);
  // Back-propagates `grad_output` (rows of the output's gradient) and writes
  // this replica's parameter gradients into grads() (overwritten, not added).
  void backward(const RunCtx& ctx, const Tensor& grad_output);
  // The model's loss on the last forward: returns this replica's share of the
  // batch loss and leaves d(loss)/d(output) in loss_grad().
  double loss(const RunCtx& ctx, const Tensor& target);
  // Rows of the last forward whose arg-max equals the class target.
  int64_t correct(const Tensor& target) const;

  const Tensor& output() const { return acts_.back(); }
  const Tensor& loss_grad() const { return loss_grad_; }
  const float* grads() const { return grads_.data(); }
  const float* stats(const Node& n) const { return stats_.data() + n.stats_offset; }
  Workers* pool() { return &pool_; }

 private:
  // Points io_ at node k's tensors (io_ is reused: no allocation per layer).
  void io_for(size_t k);

  const Model& model_;
  Workers pool_;
  std::vector<Tensor> acts_, act_grads_;
  std::vector<std::vector<Tensor>> scratch_;
  std::vector<std::vector<Tensor>> extra_grads_;  // for inputs that feed several layers
  std::vector<char> grad_ready_;
  std::vector<float> grads_, stats_;
  Tensor input_, loss_grad_;
  LayerIO io_;
};

}  // namespace dp
