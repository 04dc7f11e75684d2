// `freight bench --nproc 1,2`: data-parallel scaling on this host's CPU. For each model and
// batch size it trains an epoch on synthetic data in one process (all cores) and on N ranks
// under mpirun (the cores shared among them), both through `freight train`, and reports steps/s,
// the ratio to one process and what `freight plan --ranks N` predicted.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "freight/nn/model_file.h"

namespace freight::cli {

struct RanksBenchOptions {
  std::vector<int> nproc;  // 1 is always measured first (the reference)
  double seconds = 2;      // about how long each measured epoch lasts
  std::string log_dir;     // each run's output goes to <log_dir>/<name>-ranks-*.log
  std::string name = "bench";
};

// One JSON row per model, batch size and rank count: model, batch_size, ranks, samples,
// steps_per_second, vs_one_process, plan_steps_per_second (absent when no link was measured),
// measured_over_plan, or status "error" with the error.
nlohmann::json bench_ranks(const std::vector<nn::ModelSpec>& specs,
                           const std::vector<int64_t>& batches, const RanksBenchOptions& o);

// The rows as a Markdown section (a heading, the table and its conventions).
std::string ranks_markdown(const nlohmann::json& rows);

}  // namespace freight::cli
