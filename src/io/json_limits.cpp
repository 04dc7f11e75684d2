#include "io/json_limits.h"

#include <set>
#include <vector>

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

namespace {
// Thrown from the parser's callback to stop at the first repeated key.
struct RepeatedKey {};
}  // namespace

nlohmann::json parse_json_unique_keys(std::string_view text, std::string& duplicate) {
  using nlohmann::json;
  duplicate.clear();
  // One frame per open object or array: its keys so far, and its name for messages.
  struct Frame {
    std::set<std::string> keys;
    std::string name;
  };
  std::vector<Frame> open;
  std::string last_key;
  auto name_of_next = [&]() -> std::string {
    if (open.empty()) return "the top level";
    const bool in_object = !open.back().keys.empty() && !last_key.empty();
    return in_object ? "\"" + last_key + "\"" : open.back().name + "[]";
  };
  auto callback = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        open.push_back({{}, name_of_next()});
        last_key.clear();
        break;
      case json::parse_event_t::key: {
        std::string k = parsed.get<std::string>();
        if (!open.back().keys.insert(k).second) {
          duplicate = "\"" + k + "\" in " + open.back().name;
          throw RepeatedKey{};
        }
        last_key = std::move(k);
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        open.pop_back();
        last_key.clear();
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text, callback);
  } catch (const RepeatedKey&) {
    return json();
  }
}

}  // namespace freight::io
