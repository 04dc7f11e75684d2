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

}  // namespace
}  // namespace freight::io
