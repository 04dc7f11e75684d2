// Limits on JSON read from files (model files, safetensors headers), checked before the text
// reaches nlohmann. Internal.
#pragma once
#include <cstddef>
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

}  // namespace freight::io
