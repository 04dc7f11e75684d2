// Parse-time checks of flag values (CLI11 validators) against the ranges in freight/settings.h:
// a bad value stops `freight` before any work, with a message that names the flag, the value and
// what is allowed ("--batch-size: -1 is not an integer in 1..16777216").
#pragma once
#include <CLI/CLI.hpp>
#include <span>
#include <string_view>

#include "freight/settings.h"

namespace freight::cli {

// A decimal integer in `range`. The value is rewritten in plain decimal, because CLI11 converts
// with strtoll base 0, which would read "010" as 8.
CLI::Validator in_range(const IntRange& range);
// Any decimal integer 0..2^64-1: CLI11 alone reads "-1" into a uint64_t as 2^64-1.
CLI::Validator any_uint64();
// A finite number in `range` ("nan" and "inf" are refused: CLI11 would convert them).
CLI::Validator in_range(const RealRange& range);
// One of a fixed set of names.
CLI::Validator one_of(std::span<const std::string_view> choices);
// A comma-separated list of integers in `range`, each item also allowed to be `word` (if given).
CLI::Validator list_in_range(const IntRange& range, std::string_view word = {});
// A comma-separated list with at least one item ("" or "," is an error, not the default).
CLI::Validator non_empty_list();
// A value that is not empty or blank: `--data ''` or `--save ""` is an error, not the default.
CLI::Validator non_empty_value();
// non_empty_value() on every option of every subcommand that takes a value.
void refuse_empty_values(CLI::App& app);

}  // namespace freight::cli
