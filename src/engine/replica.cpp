#include "engine/replica.h"

namespace dp {

Replica::Replica(const Model& model, Executor* exec, Allocator* alloc) : model_(model), exec_(exec) {
  const size_t n = model_.nodes.size();
  for (size_t k = 0; k < n; ++k) {
    acts_.emplace_back(alloc);
    act_grads_.emplace_back(alloc);
  }
  scratch_.resize(n);
  extra_grads_.resize(n);
  grad_ready_.assign(n, 0);
  grads_ = Tensor(alloc);
  stats_ = Tensor(alloc);
  loss_grad_ = Tensor(alloc);
  grads_.resize(DP_F32, Shape{static_cast<int64_t>(model_.num_params())});
  stats_.resize(DP_F32, Shape{model_.stats_total});
  exec_->zero(grads_.f32(), grads_.numel());
  grads_at_ = grads_.f32();
  size_t max_inputs = 1;
  for (size_t k = 0; k < n; ++k) {
    for (size_t i = 0; i < model_.nodes[k].inputs.size(); ++i) extra_grads_[k].emplace_back(alloc);
    if (model_.nodes[k].inputs.size() > max_inputs) max_inputs = model_.nodes[k].inputs.size();
  }
  io_.in.reserve(max_inputs);
  io_.gin.reserve(max_inputs);
  io_.alloc = alloc;
}

void Replica::final_from(void* self, int64_t from) {
  auto* r = static_cast<Replica*>(self);
  r->exec_->backward_final(r->node_, from);
}

void Replica::io_for(size_t k) {
  const Node& n = model_.nodes[k];
  LayerIO& io = io_;
  io.grads_final = nullptr;
  io.final_user = nullptr;
  io.in.clear();
  for (int j : n.inputs) io.in.push_back(j < 0 ? &input_ : &acts_[j]);
  io.out = &acts_[k];
  io.gout = nullptr;
  io.gin.clear();
  io.params = params_ + n.param_offset;
  io.grads = grads_at_ + n.param_offset;
  io.assign_grads = false;
  io.buffers = buffers_ + n.buffer_offset;
  io.stats = stats_.f32() + n.stats_offset;
  io.scratch = &scratch_[k];
}

void Replica::forward(const RunCtx& ctx, const Tensor& input) {
  input_ = input.rows(0, input.shape()[0]);  // a view, in the input's memory
  for (size_t k = 0; k < model_.nodes.size(); ++k) {
    io_for(k);
    exec_->forward(k, ctx, io_);
  }
}

void Replica::backward(const RunCtx& ctx, const Tensor& grad_output) {
  const bool by_layer = exec_->zero_grads_by_layer();
  if (!by_layer) exec_->zero(grads_at_, grads_.numel());
  size_t last = model_.nodes.size() - 1;
  std::fill(grad_ready_.begin(), grad_ready_.end(), 0);
  // The output's gradient is read in place: the last layer gets a view.
  Tensor gout_view = grad_output.rows(0, grad_output.shape()[0]);
  for (size_t k = last + 1; k-- > 0;) {
    const Node& n = model_.nodes[k];
    const Tensor* gout = k == last ? &gout_view : &act_grads_[k];
    const bool unused = k != last && !grad_ready_[k];  // nothing downstream used it
    // Zeroed here, by layer, unless the layer's backward overwrites them.
    const bool assign = by_layer && !unused && n.layer->assigns_grads();
    if (by_layer && n.param_count > 0 && !assign) exec_->zero(grads_at_ + n.param_offset, n.param_count);
    if (unused) {
      exec_->backward_done(k);
      continue;
    }
    io_for(k);
    io_.gout = gout;
    io_.assign_grads = assign;
    node_ = k;
    if (exec_->wants_partial()) io_.grads_final = &Replica::final_from, io_.final_user = this;
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
    exec_->backward(k, ctx, io_);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      int j = n.inputs[i];
      if (j < 0) continue;
      if (io_.gin[i] == &act_grads_[j]) {
        grad_ready_[j] = 1;
        continue;
      }
      exec_->add(act_grads_[j].f32(), extra_grads_[k][i].f32(), act_grads_[j].numel());
    }
    exec_->backward_done(k);
  }
}

}  // namespace dp
