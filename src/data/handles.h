// What the dataset and loader handles of dp.h are. The dataset is shared:
// loaders hold it too, so a dataset handle destroyed before its loaders
// leaves them working (dp.h still asks callers not to rely on it).
#pragma once
#include <memory>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/transform.h"

struct dp_dataset {
  std::shared_ptr<dp::Dataset> ds;
  // Set by dp_dataset_set_transform; a loader takes the one current at its
  // creation, so changing it never races with running workers.
  std::shared_ptr<const dp::Transform> transform;
};

struct dp_loader {
  std::unique_ptr<dp::Loader> loader;
};
