#include "group/replica.h"

#include <cstring>

namespace dp {

Replica::Replica(const Model& model, int threads)
    : model_(model),
      pool_(threads),
      acts_(model.nodes.size()),
      act_grads_(model.nodes.size()),
      scratch_(model.nodes.size()),
      extra_grads_(model.nodes.size()),
      grad_ready_(model.nodes.size(), 0),
      grads_(model.params.size(), 0.0f),
      stats_(model.stats_total, 0.0f) {
  size_t max_inputs = 1;
  for (size_t k = 0; k < model.nodes.size(); ++k) {
    extra_grads_[k].resize(model.nodes[k].inputs.size());
    if (model.nodes[k].inputs.size() > max_inputs) max_inputs = model.nodes[k].inputs.size();
  }
  io_.in.reserve(max_inputs);
  io_.gin.reserve(max_inputs);
}

void Replica::io_for(size_t k) {
  const Node& n = model_.nodes[k];
  LayerIO& io = io_;
  io.in.clear();
  for (int j : n.inputs) io.in.push_back(j < 0 ? &input_ : &acts_[j]);
  io.out = &acts_[k];
  io.gout = nullptr;
  io.gin.clear();
  io.params = model_.params.data() + n.param_offset;
  io.grads = grads_.data() + n.param_offset;
  io.buffers = model_.buffers.data() + n.buffer_offset;
  io.stats = stats_.data() + n.stats_offset;
  io.scratch = &scratch_[k];
}

void Replica::forward(const RunCtx& ctx, const Tensor& input) {
  input_ = Tensor::view(const_cast<void*>(input.data()), input.dtype(), input.shape());
  for (size_t k = 0; k < model_.nodes.size(); ++k) {
    io_for(k);
    model_.nodes[k].layer->forward(ctx, io_);
  }
}

void Replica::backward(const RunCtx& ctx, const Tensor& grad_output) {
  std::memset(grads_.data(), 0, grads_.size() * sizeof(float));
  size_t last = model_.nodes.size() - 1;
  std::fill(grad_ready_.begin(), grad_ready_.end(), 0);
  // The output's gradient is read in place: the last layer gets a view.
  Tensor gout_view = Tensor::view(const_cast<void*>(grad_output.data()), DP_F32, grad_output.shape());
  for (size_t k = last + 1; k-- > 0;) {
    const Node& n = model_.nodes[k];
    const Tensor* gout = k == last ? &gout_view : &act_grads_[k];
    if (k != last && !grad_ready_[k]) continue;  // nothing downstream used it
    io_for(k);
    io_.gout = gout;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      int j = n.inputs[i];
      if (j < 0) {
        io_.gin.push_back(nullptr);
      } else if (!grad_ready_[j]) {
        io_.gin.push_back(&act_grads_[j]);
        grad_ready_[j] = 2;  // claimed by this layer, summed below
      } else {
        io_.gin.push_back(&extra_grads_[k][i]);
      }
    }
    n.layer->backward(ctx, io_);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      int j = n.inputs[i];
      if (j < 0) continue;
      if (io_.gin[i] == &act_grads_[j]) {
        grad_ready_[j] = 1;
        continue;
      }
      float* dst = act_grads_[j].f32();
      const float* src = extra_grads_[k][i].f32();
      for (int64_t e = 0, m = act_grads_[j].numel(); e < m; ++e) dst[e] += src[e];
    }
  }
}

double Replica::loss(const RunCtx& ctx, const Tensor& target) {
  return model_.loss->forward_backward(ctx, acts_.back(), target, &loss_grad_);
}

int64_t Replica::correct(const Tensor& target) const {
  const Tensor& out = acts_.back();
  if (target.dtype() != DP_I64 || out.shape().ndim != 2) return 0;
  int64_t rows = out.shape()[0], classes = out.shape()[1], hits = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = out.f32() + r * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (x[c] > x[best]) best = c;
    hits += best == target.i64()[r];
  }
  return hits;
}

}  // namespace dp
