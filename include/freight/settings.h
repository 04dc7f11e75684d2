// The allowed values of Freight's numeric and named settings, in one place. The command line
// checks its flags against them when it parses (tools/freight/flags.h); the library checks
// TrainOptions, ExplainOptions, PlanOptions and a model file's "train" block against them before
// any work. A value out of range is an error that names the flag (or file and key), the value and
// the range: never a silent fallback to a default.
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "freight/nn/model_file.h"

namespace freight {

// The integers lo..hi, both included.
struct IntRange {
  int64_t lo, hi;
  bool contains(int64_t v) const { return v >= lo && v <= hi; }
  std::string describe() const;  // "an integer in 1..16777216", "an integer >= 1"
};

// Finite reals from lo to hi, each end open or closed (hi = +inf: no upper bound). NaN and the
// infinities never belong: a NaN compares false with everything, so a plain `v < lo` test would
// let it through.
struct RealRange {
  double lo, hi;
  bool lo_open = false, hi_open = false;
  bool contains(double v) const;
  std::string describe() const;  // "a finite number > 0", "a number in [0, 1)"
};

namespace limits {
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
// 2^24 samples per batch is far beyond what any device holds for any zoo model, and keeps
// batch x features products well inside int64.
inline constexpr IntRange batch_size{1, int64_t(1) << 24};
inline constexpr IntRange epochs{1, 1'000'000};
// The optimizers apply the learning rate and the weight decay in float32: a larger value would
// be infinite there.
inline constexpr double kFloatMax = double(std::numeric_limits<float>::max());
inline constexpr RealRange lr{0, kFloatMax, true};
inline constexpr RealRange momentum{0, 1, false, true};  // 1 would never forget a gradient
inline constexpr RealRange weight_decay{0, kFloatMax};
inline constexpr IntRange step_size{1, 1'000'000};  // epochs between learning-rate steps
inline constexpr RealRange gamma{0, kInf, true};    // the step schedule's factor
inline constexpr IntRange threads{0, 1024};         // 0: all cores
inline constexpr IntRange threads_given{1, 1024};   // a thread count in a list (bench)
inline constexpr IntRange count{1, kMaxInt};        // sample limits, log interval, steps, ...
inline constexpr IntRange count_or_zero{0, kMaxInt};
inline constexpr IntRange bucket_mb{0, 1024};           // gradient buckets (0: one, after backward)
inline constexpr IntRange nproc{1, 4096};               // processes of a data-parallel job
inline constexpr IntRange accumulate{1, 1 << 20};       // batches per optimizer step
inline constexpr RealRange dist_timeout{0, 1e6, true};  // seconds

inline constexpr std::array<std::string_view, 4> optimizers{"sgd", "nesterov", "adam", "adamw"};
inline constexpr std::array<std::string_view, 4> schedules{"none", "step", "cosine", "onecycle"};
inline constexpr std::array<std::string_view, 3> precisions{"fp32", "tf32", "bf16"};
inline constexpr std::array<std::string_view, 2> splits{"test", "train"};
}  // namespace limits

// "sgd, nesterov, adam, adamw"
std::string join_choices(std::span<const std::string_view> choices);

// Throw freight::Error("<what>: <value> is not <range>") when `v` is out of range; return `v`.
int64_t check_setting(const std::string& what, int64_t v, const IntRange& range);
double check_setting(const std::string& what, double v, const RealRange& range);
const std::string& check_setting(const std::string& what, const std::string& v,
                                 std::span<const std::string_view> choices);

// A model file's "train" default for `key` (fallback when it has none), checked: a value that
// is not a number, not whole where an integer is needed, or out of range is an error naming the
// file, the key and the value.
int64_t train_default_int(const nn::ModelSpec& spec, const std::string& key, int64_t fallback,
                          const IntRange& range);
double train_default_real(const nn::ModelSpec& spec, const std::string& key, double fallback,
                          const RealRange& range);
std::string train_default_choice(const nn::ModelSpec& spec, const std::string& key,
                                 const std::string& fallback,
                                 std::span<const std::string_view> choices);

// make_optimizer() reads momentum 0 for nesterov as "0.9" and weight decay 0 for adamw as "0.01"
// (their defaults). So that an explicit 0 is not silently replaced, it is refused, saying what to
// do instead. `momentum` and `weight_decay` are the values set by flag or TrainOptions (unset: the
// model file's value, if it has one, is checked instead).
void check_optimizer_settings(const nn::ModelSpec& spec, const std::string& optimizer,
                              std::optional<double> momentum, std::optional<double> weight_decay);

// The whole of `text` as a decimal number ("" / trailing characters / overflow: nullopt).
std::optional<int64_t> parse_int(std::string_view text);
std::optional<uint64_t> parse_uint(std::string_view text);
std::optional<double> parse_real(std::string_view text);  // "nan" and "inf" parse (and fail checks)

}  // namespace freight
