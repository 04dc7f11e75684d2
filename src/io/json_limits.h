// Limits on JSON read from files (model files, safetensors headers), checked before the text
// reaches nlohmann. Internal.
#pragma once
#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace freight::io {

// Deepest nesting of arrays and objects a file may use. Real files need under 10 levels (a
// model file's residual block inside a repeat is 8); nlohmann's serializer and the model
// builder recurse once per level, so an unbounded depth (200,000 '[') overflows the stack.
constexpr int kMaxJsonDepth = 128;

// The nesting depth of `text`, counting '[' and '{' outside strings, scanning only until it
// exceeds `stop_after` (so the answer is min(depth, stop_after + 1) and the scan stays cheap).
// The text need not be valid JSON: the parser reports syntax errors afterwards.
int json_nesting_depth(std::string_view text, int stop_after = kMaxJsonDepth);

// Parses `text` (nlohmann's parse_error on bad syntax). An object that names a key twice leaves
// the result null and `duplicate` saying which key and where (`"lr" in "train"`): nlohmann would
// keep the last value without a word, so a model file's second "layers" would replace its first.
nlohmann::json parse_json_unique_keys(std::string_view text, std::string& duplicate);

}  // namespace freight::io
