// Factories of the built-in layers and losses; used only by registry.cpp.
#pragma once
#include "layers/layer.h"

namespace dp {

std::unique_ptr<Layer> make_linear(Args& a);
std::unique_ptr<Layer> make_conv2d(Args& a);
std::unique_ptr<Layer> make_relu(Args& a);
std::unique_ptr<Layer> make_leaky_relu(Args& a);
std::unique_ptr<Layer> make_sigmoid(Args& a);
std::unique_ptr<Layer> make_tanh(Args& a);
std::unique_ptr<Layer> make_gelu(Args& a);
std::unique_ptr<Layer> make_max_pool2d(Args& a);
std::unique_ptr<Layer> make_avg_pool2d(Args& a);
std::unique_ptr<Layer> make_global_avg_pool(Args& a);
std::unique_ptr<Layer> make_flatten(Args& a);
std::unique_ptr<Layer> make_dropout(Args& a);
std::unique_ptr<Layer> make_batch_norm(Args& a);
std::unique_ptr<Layer> make_batch_norm1d(Args& a);
std::unique_ptr<Layer> make_batch_norm2d(Args& a);
std::unique_ptr<Layer> make_softmax(Args& a);
std::unique_ptr<Layer> make_log_softmax(Args& a);
std::unique_ptr<Layer> make_layer_norm(Args& a);
std::unique_ptr<Layer> make_add(Args& a);
std::unique_ptr<Layer> make_concat(Args& a);

std::unique_ptr<Loss> make_cross_entropy(Args& a);
std::unique_ptr<Loss> make_mse(Args& a);
std::unique_ptr<Loss> make_nll(Args& a);
std::unique_ptr<Loss> make_l1(Args& a);
std::unique_ptr<Loss> make_smooth_l1(Args& a);
std::unique_ptr<Loss> make_huber(Args& a);
std::unique_ptr<Loss> make_bce(Args& a);
std::unique_ptr<Loss> make_bce_with_logits(Args& a);

}  // namespace dp
