// Ranges of settings and their checks (freight/settings.h).
#include "freight/settings.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "freight/error.h"

namespace freight {

namespace {
template <class T>
std::optional<T> parse_number(std::string_view text) {
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}
}  // namespace

std::optional<int64_t> parse_int(std::string_view text) {
  return parse_number<int64_t>(text);
}
std::optional<uint64_t> parse_uint(std::string_view text) {
  return parse_number<uint64_t>(text);  // from_chars takes no sign: "-1" does not wrap around
}
std::optional<double> parse_real(std::string_view text) {
  return parse_number<double>(text);
}

std::string IntRange::describe() const {
  if (hi == limits::kMaxInt) return fmt::format("an integer >= {}", lo);
  return fmt::format("an integer in {}..{}", lo, hi);
}

bool RealRange::contains(double v) const {
  if (!std::isfinite(v)) return false;
  bool above = lo_open ? v > lo : v >= lo;
  bool below = hi_open ? v < hi : v <= hi;
  return above && below;
}

std::string RealRange::describe() const {
  if (std::isinf(hi)) return fmt::format("a finite number {} {}", lo_open ? ">" : ">=", lo);
  if (hi == limits::kFloatMax && !hi_open)
    return fmt::format("a number {} {} and at most float32's largest, {:.7g}",
                       lo_open ? ">" : ">=", lo, hi);
  return fmt::format("a number in {}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
}

std::string join_choices(std::span<const std::string_view> choices) {
  std::string out;
  for (std::string_view c : choices) out += (out.empty() ? "" : ", ") + std::string(c);
  return out;
}

int64_t check_setting(const std::string& what, int64_t v, const IntRange& range) {
  FREIGHT_CHECK(range.contains(v), fmt::format("{}: {} is not {}", what, v, range.describe()));
  return v;
}

double check_setting(const std::string& what, double v, const RealRange& range) {
  FREIGHT_CHECK(range.contains(v), fmt::format("{}: {} is not {}", what, v, range.describe()));
  return v;
}

const std::string& check_setting(const std::string& what, const std::string& v,
                                 std::span<const std::string_view> choices) {
  for (std::string_view c : choices)
    if (v == c) return v;
  throw Error(fmt::format("{}: '{}' is not one of {}", what, v, join_choices(choices)));
}

namespace {
// Where a model file's default came from, for messages: "model file 'x.json': train.lr".
std::string origin(const nn::ModelSpec& spec, const std::string& key) {
  return fmt::format("model file '{}': train.{}", spec.path, key);
}
}  // namespace

int64_t train_default_int(const nn::ModelSpec& spec, const std::string& key, int64_t fallback,
                          const IntRange& range) {
  auto it = spec.train_defaults.find(key);
  if (it == spec.train_defaults.end()) return fallback;
  // JSON has one number type: 64 may come back as "64" or, written 6.4e1, as "64.0". A whole
  // number in range is taken either way; 2.5 or 1e12 are not.
  std::optional<double> v = parse_real(it->second);
  bool whole = v && std::isfinite(*v) && std::trunc(*v) == *v;
  bool fits = whole && *v >= double(range.lo) && *v <= double(range.hi);
  FREIGHT_CHECK(fits,
                fmt::format("{} = {} is not {}", origin(spec, key), it->second, range.describe()));
  return int64_t(*v);
}

double train_default_real(const nn::ModelSpec& spec, const std::string& key, double fallback,
                          const RealRange& range) {
  auto it = spec.train_defaults.find(key);
  if (it == spec.train_defaults.end()) return fallback;
  std::optional<double> v = parse_real(it->second);
  FREIGHT_CHECK(v && range.contains(*v),
                fmt::format("{} = {} is not {}", origin(spec, key), it->second, range.describe()));
  return *v;
}

std::string train_default_choice(const nn::ModelSpec& spec, const std::string& key,
                                 const std::string& fallback,
                                 std::span<const std::string_view> choices) {
  auto it = spec.train_defaults.find(key);
  if (it == spec.train_defaults.end()) return fallback;
  return check_setting(origin(spec, key), it->second, choices);
}

void check_optimizer_settings(const nn::ModelSpec& spec, const std::string& optimizer,
                              std::optional<double> momentum, std::optional<double> weight_decay) {
  // The value in force and where it came from: the flag, else the model file, else none.
  auto explicit_value = [&](std::optional<double> given, const char* flag,
                            const char* key) -> std::optional<std::pair<std::string, double>> {
    if (given) return std::pair{fmt::format("{} {}", flag, *given), *given};
    auto it = spec.train_defaults.find(key);
    if (it == spec.train_defaults.end()) return std::nullopt;
    std::optional<double> v = parse_real(it->second);
    if (!v) return std::nullopt;  // reported by train_default_real
    return std::pair{fmt::format("{} = {}", origin(spec, key), it->second), *v};
  };
  if (optimizer == "nesterov")
    if (auto m = explicit_value(momentum, "--momentum", "momentum"); m && m->second == 0)
      throw Error(
          fmt::format("{}: Nesterov momentum needs a momentum > 0 (without one it is "
                      "0.9); for plain SGD use --optimizer sgd",
                      m->first));
  if (optimizer == "adamw")
    if (auto w = explicit_value(weight_decay, "--weight-decay", "weight_decay");
        w && w->second == 0)
      throw Error(
          fmt::format("{}: AdamW without weight decay is Adam; use --optimizer adam "
                      "(without a weight decay, adamw's is 0.01)",
                      w->first));
}

}  // namespace freight
