#include "io/json_limits.h"

namespace freight::io {

int json_nesting_depth(std::string_view text, int stop_after) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      // Inside a string only an unescaped quote matters; "\\" escapes the next character.
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > stop_after) break;
      }
    } else if (c == ']' || c == '}') {
      // Unbalanced closers are a syntax error for the parser to report; never go below 0.
      if (depth > 0) --depth;
    }
  }
  return deepest;
}

}  // namespace freight::io
