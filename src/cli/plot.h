// `dp train --plot`: the run's loss and test accuracy as one SVG chart.
//
// Two panels on one step axis (matplotlib's sharex): above, the training loss
// per step (a faint line, min and max per pixel column when there are more
// steps than pixels), its centred moving average over about 1% of the steps
// (at least 5; narrowed symmetrically near either end, so never lagging or
// pulled towards later values), and the train loss (the epoch's mean) and test
// loss of each finished epoch as markers at the epoch's last step; below, the
// test accuracy of each epoch in %. Evaluations made within an epoch (`dp
// train --eval-every N`: TrainingRecord::evals) add smaller, hollow markers of
// the same colours, and one line then joins all the test losses (and one all
// the test accuracies), epoch ends and mid-epoch points, in step order; a
// record without evals gives the chart it gave before evals existed, byte for
// byte. Ticks on 1-2-5 steps, a secondary epoch axis (step / steps_per_epoch)
// above the first panel, axis titles with units, a legend, the run's settings
// in a caption. No timestamps: the same record gives the same bytes.
//
// What tests/check_plot.py relies on (ids and classes):
//   #title, #legend (.legend-entry, one <text> each), #caption (one <text
//   class="caption-line"> per line, joined by a space they give the caption);
//   #panel-loss and #panel-accuracy, each with one <rect class="frame">;
//   axes #axis-step (below the accuracy panel), #axis-epoch (above the loss
//   panel), #axis-loss, #axis-accuracy: <line class="tick"> and <text
//   class="tick-label"> (centred on its tick; numbers, "20k" for 20000),
//   one <text class="axis-title">; #axis-step-shared: the loss panel's step
//   ticks (no labels);
//   series: polylines .loss-raw and .loss-smooth, <g> .train-loss, .test-loss,
//   .test-accuracy with one .marker (circle or square) per epoch, and a
//   <polyline> joining them (not in .test-loss, .test-accuracy when there are
//   evals); with evals, <g>
//   .test-loss-mid and .test-accuracy-mid (before, so under, .test-loss and
//   .test-accuracy; there without epochs too), each with the one <polyline>
//   through evals and epoch ends in step order, and a hollow (fill #ffffff),
//   smaller .marker (square, circle) per evaluation (where more than two fall
//   in one px column, only its lowest and highest, as for the per-step line);
//   a .legend-entry per series drawn, data-series its class, in the order
//   loss-raw, loss-smooth, train-loss, test-loss, test-loss-mid,
//   test-accuracy, test-accuracy-mid (labels "test loss (mid-epoch)", ...);
//   <text class="note"> inside a panel that has nothing to show.
//   Only <text> elements carry a rotation; no <g> has a transform.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dpcli {

struct EpochPoint {
  int64_t epoch;                                // 1-based: the epoch that has just finished
  int64_t step;                                 // global step at its end (epoch * steps_per_epoch for whole epochs)
  double train_loss, test_loss, test_accuracy;  // accuracy in [0, 1]
};

// A test-set evaluation within an epoch (`dp train --eval-every N`).
struct EvalPoint {
  int64_t step;                     // global step it followed (not an epoch's last: those are in `epochs`)
  double test_loss, test_accuracy;  // accuracy in [0, 1]
};

struct TrainingRecord {
  // (global step, 1-based, training loss of that step), every step: a
  // resumed run's start past 0. Downsampled for drawing.
  std::vector<std::pair<int64_t, double>> step_losses;
  std::vector<EpochPoint> epochs;  // one per finished epoch (step = global step at its end)
  // Evaluations made during an epoch (the epoch-end ones are in `epochs`),
  // drawn in step order; empty without --eval-every.
  std::vector<EvalPoint> evals;
  int64_t steps_per_epoch = 0;  // 0: unknown (no epoch axis)
  // The run's settings, one line (wrapped at " · " to fit), e.g.
  // "model.json · fashion-mnist · 4 devices · batch 64 · sgd lr 0.05 · 3 epochs".
  std::string caption;
};

// Writes the chart; throws Failure(kUsage, ...) if it cannot write path.
// Non-finite losses leave gaps; any record (no steps, no epochs, a resumed
// run's steps starting past 0) gives a well-formed chart.
void write_plot(const std::string& path, const TrainingRecord& r);

// The chart as a string (write_plot's content).
std::string render_plot(const TrainingRecord& r);

}  // namespace dpcli
