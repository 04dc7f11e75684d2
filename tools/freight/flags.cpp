// CLI11 validators for freight's flags (flags.h).
#include "flags.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <sstream>

namespace freight::cli {

namespace {
std::string trimmed(const std::string& s) {
  size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// "" when `text` is an integer in range (and then rewritten in plain decimal), else the reason.
std::string check_int(std::string& text, const IntRange& range) {
  std::optional<int64_t> v = parse_int(text);
  if (!v || !range.contains(*v)) return fmt::format("{} is not {}", text, range.describe());
  text = std::to_string(*v);
  return {};
}

std::string range_text(const IntRange& r) {
  return r.hi == limits::kMaxInt ? fmt::format(">={}", r.lo) : fmt::format("{}..{}", r.lo, r.hi);
}
}  // namespace

CLI::Validator in_range(const IntRange& range) {
  return CLI::Validator([range](std::string& text) { return check_int(text, range); },
                        range_text(range));
}

CLI::Validator any_uint64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::optional<uint64_t> v = parse_uint(text);
        if (!v) return fmt::format("{} is not an integer in 0..{}", text, UINT64_MAX);
        text = std::to_string(*v);
        return {};
      },
      "0..2^64-1");
}

CLI::Validator in_range(const RealRange& range) {
  std::string desc = std::isinf(range.hi)
                         ? fmt::format("{}{}", range.lo_open ? ">" : ">=", range.lo)
                         : fmt::format("{}{},{}{}", range.lo_open ? "(" : "[", range.lo, range.hi,
                                       range.hi_open ? ")" : "]");
  return CLI::Validator(
      [range](std::string& text) -> std::string {
        std::optional<double> v = parse_real(text);
        if (!v || !range.contains(*v)) return fmt::format("{} is not {}", text, range.describe());
        return {};
      },
      desc);
}

CLI::Validator one_of(std::span<const std::string_view> choices) {
  std::string all = join_choices(choices);
  return CLI::Validator(
      [choices, all](std::string& text) -> std::string {
        for (std::string_view c : choices)
          if (text == c) return {};
        return fmt::format("'{}' is not one of {}", text, all);
      },
      "{" + all + "}");
}

CLI::Validator list_in_range(const IntRange& range, std::string_view word) {
  std::string w(word);
  std::string desc = range_text(range) + (w.empty() ? "" : "|" + w) + ",...";
  return CLI::Validator(
      [range, w](std::string& text) -> std::string {
        if (trimmed(text).empty()) return "the list is empty (leave the flag out for the default)";
        std::stringstream items(text);
        std::string item;
        while (std::getline(items, item, ',')) {
          item = trimmed(item);
          if (!w.empty() && item == w) continue;
          std::optional<int64_t> v = parse_int(item);
          if (!v || !range.contains(*v))
            return fmt::format("'{}' in {} is not {}{}", item, text, range.describe(),
                               w.empty() ? "" : " or " + w);
        }
        return {};
      },
      desc);
}

CLI::Validator non_empty_list() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::stringstream items(text);
        std::string item;
        while (std::getline(items, item, ','))
          if (!trimmed(item).empty()) return {};
        return "the list is empty (leave the flag out for the default)";
      },
      "NAME,...");
}

CLI::Validator non_empty_value() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (!trimmed(text).empty()) return {};
        return "'' is empty: give a value, or leave the flag out for its default";
      },
      "");
}

void refuse_empty_values(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    for (CLI::Option* o : sub->get_options())
      if (o->get_items_expected_min() >= 1) o->check(non_empty_value());
}

}  // namespace freight::cli
