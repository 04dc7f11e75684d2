// The nesting pre-scan that guards every JSON file Freight parses (model files, safetensors
// headers) against stack exhaustion in the recursive parts of nlohmann and of the model builder.
#include "io/json_limits.h"

#include <gtest/gtest.h>

#include <string>

namespace freight::io {
namespace {

TEST(JsonLimits, CountsArraysAndObjectsOutsideStrings) {
  EXPECT_EQ(json_nesting_depth(""), 0);
  EXPECT_EQ(json_nesting_depth("3"), 0);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}], "c": {}})"), 4);
  EXPECT_EQ(json_nesting_depth(R"(["[[[", "{{{"])"), 1) << "brackets in strings do not count";
  EXPECT_EQ(json_nesting_depth(R"(["\"[[[", "\\", [[]]])"), 3) << "escaped quotes and backslashes";
  EXPECT_EQ(json_nesting_depth("]]]][[]"), 2) << "stray closers never go below zero";
}

TEST(JsonLimits, StopsScanningPastTheLimit) {
  std::string deep(1000000, '[');
  EXPECT_EQ(json_nesting_depth(deep), kMaxJsonDepth + 1);
  EXPECT_EQ(json_nesting_depth(deep, 5), 6);
  EXPECT_EQ(json_nesting_depth(std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']')),
            kMaxJsonDepth);
}

// A key named twice in one object is reported with where it is; the same key in different
// objects, or in objects inside an array, is not a repeat.
TEST(JsonLimits, FindsAKeyNamedTwiceInOneObject) {
  std::string dup;
  EXPECT_EQ(
      parse_json_unique_keys(R"({"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]})", dup).dump(),
      R"({"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]})");
  EXPECT_EQ(dup, "");
  EXPECT_TRUE(parse_json_unique_keys(R"({"a": 1, "a": 2})", dup).is_null());
  EXPECT_EQ(dup, R"("a" in the top level)");
  parse_json_unique_keys(R"({"x": {}, "train": {"lr": 1, "epochs": 2, "lr": 3}})", dup);
  EXPECT_EQ(dup, R"("lr" in "train")");
  parse_json_unique_keys(R"({"layers": [{"type": "relu"}, {"type": "linear", "type": "x"}]})", dup);
  EXPECT_EQ(dup, R"("type" in "layers"[])");
  EXPECT_THROW(parse_json_unique_keys(R"({"a": 1,})", dup), nlohmann::json::parse_error);
}

}  // namespace
}  // namespace freight::io
