// Layer and loss types by name. Built-ins are registered from one explicit
// list (registry.cpp), never by static initialisers; plugins add to the same
// registry at run time.
#pragma once
#include <map>
#include <string>

#include "layers/layer.h"

namespace dp {

class Registry {
 public:
  Registry();  // with every built-in
  void add_layer(const std::string& type, LayerFactory f);
  void remove_layer(const std::string& type) { layers_.erase(type); }
  void add_loss(const std::string& type, LossFactory f);
  bool has_layer(const std::string& type) const { return layers_.count(type) != 0; }
  // Null when unknown.
  LayerFactory layer(const std::string& type) const;
  LossFactory loss(const std::string& type) const;
  std::string layer_names() const;  // "add, avg_pool2d, ..." for error messages
  std::string loss_names() const;

 private:
  std::map<std::string, LayerFactory> layers_;
  std::map<std::string, LossFactory> losses_;
};

}  // namespace dp
