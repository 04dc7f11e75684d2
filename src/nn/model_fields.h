// Typed access to the fields of a model file, for the builder in model_file.cpp. Internal.
// nlohmann's get<T>() throws type_error on a value of the wrong type, which used to escape as
// "internal error: [json.exception.type_error.302]"; every read of a model file goes through
// these instead, so a message names the file, the layer and the field and shows the value.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "freight/error.h"
#include "freight/nn/layers.h"

namespace freight::nn::fields {

using nlohmann::json;

// The largest value of any one size, count or offset in a model file. Far beyond real networks,
// and small enough that the builder's products of two such values cannot overflow int64.
constexpr int64_t kMaxFieldValue = INT32_MAX;

// An error that already names the file and the layer: passed through unchanged when it
// crosses an enclosing layer (a residual's body), where any other Error gets that context.
class SpecError : public Error {
 public:
  using Error::Error;
};

struct Ctx {
  std::string file;
  std::string where;  // "layer 3 (conv2d)"
  SpecError error(const std::string& what) const {
    return SpecError(fmt::format("model file '{}': {}: {}", file, where, what));
  }
};

// A JSON value for a message, cut short: values can be whole layer lists.
inline std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() <= 60 ? s : s.substr(0, 57) + "...";
}

// Levenshtein distance, for "did you mean" (short keys only).
inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Refuses a key of `obj` that is not in `known` (a misspelled "stide" would otherwise be ignored
// and its default used without a word). "comment" and keys starting with "_" are notes for
// people and always allowed, and so is "type" in a layer. `what` says whose fields they are
// ("conv2d", "\"input\"").
inline void check_known_fields(const json& obj, const std::vector<const char*>& known,
                               const std::string& what, const Ctx& ctx, bool layer = false) {
  if (!obj.is_object()) return;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& key = it.key();
    if (key == "comment" || key.starts_with("_") || (layer && key == "type")) continue;
    bool found = false;
    std::string list, closest;
    size_t best = 3;  // suggest only within two edits
    for (const char* k : known) {
      found = found || key == k;
      list += (list.empty() ? "" : ", ") + std::string(k);
      const size_t d = edit_distance(key, k);
      if (d < best) best = d, closest = k;
    }
    if (found) continue;
    throw ctx.error(
        fmt::format("unknown field \"{}\"{}; {} takes: {}", key,
                    closest.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", closest), what,
                    list.empty() ? "no fields" : list));
  }
}

// The field `key` of `obj`, or nullptr when it is absent (or `obj` is no object).
inline const json* field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// An integer in [min, max]: nlohmann holds non-negative integers as unsigned, so those above
// INT64_MAX are seen here and refused rather than read back as negative.
inline int64_t as_int(const json& v, const char* key, int64_t min, int64_t max, const Ctx& ctx) {
  bool in_range = v.is_number_unsigned()
                      ? v.get<uint64_t>() <= uint64_t(max) && int64_t(v.get<uint64_t>()) >= min
                  : v.is_number_integer() ? v.get<int64_t>() >= min && v.get<int64_t>() <= max
                                          : false;
  if (!in_range)
    throw ctx.error(
        fmt::format("\"{}\" must be an integer from {} to {}, got {}", key, min, max, show(v)));
  return v.get<int64_t>();
}

inline int64_t get_int(const json& obj, const char* key, const Ctx& ctx, int64_t min,
                       int64_t max = kMaxFieldValue) {
  const json* v = field(obj, key);
  if (!v) throw ctx.error(fmt::format("missing \"{}\"", key));
  return as_int(*v, key, min, max, ctx);
}

inline int64_t get_int_or(const json& obj, const char* key, int64_t fallback, const Ctx& ctx,
                          int64_t min, int64_t max = kMaxFieldValue) {
  return field(obj, key) ? get_int(obj, key, ctx, min, max) : fallback;
}

inline bool get_bool_or(const json& obj, const char* key, bool fallback, const Ctx& ctx) {
  const json* v = field(obj, key);
  if (!v) return fallback;
  if (!v->is_boolean())
    throw ctx.error(fmt::format("\"{}\" must be true or false, got {}", key, show(*v)));
  return v->get<bool>();
}

inline double get_number_or(const json& obj, const char* key, double fallback, const Ctx& ctx) {
  const json* v = field(obj, key);
  if (!v) return fallback;
  if (!v->is_number() || !std::isfinite(v->get<double>()))
    throw ctx.error(fmt::format("\"{}\" must be a number, got {}", key, show(*v)));
  return v->get<double>();
}

inline std::string get_string_or(const json& obj, const char* key, const std::string& fallback,
                                 const Ctx& ctx) {
  const json* v = field(obj, key);
  if (!v) return fallback;
  if (!v->is_string())
    throw ctx.error(fmt::format("\"{}\" must be a string, got {}", key, show(*v)));
  return v->get<std::string>();
}

// An integer (both sides) or [h, w], each at least `min`; `fallback` when absent (nullptr:
// the field is required).
inline Size2 get_pair(const json& obj, const char* key, const Ctx& ctx, int64_t min,
                      const Size2* fallback) {
  const json* v = field(obj, key);
  if (!v) {
    if (!fallback) throw ctx.error(fmt::format("missing \"{}\"", key));
    return *fallback;
  }
  auto good = [&](const json& x) {
    if (x.is_number_unsigned())
      return x.get<uint64_t>() <= uint64_t(kMaxFieldValue) && int64_t(x.get<uint64_t>()) >= min;
    return x.is_number_integer() && x.get<int64_t>() >= min && x.get<int64_t>() <= kMaxFieldValue;
  };
  if (good(*v)) return Size2(v->get<int64_t>());
  if (v->is_array() && v->size() == 2 && good((*v)[0]) && good((*v)[1]))
    return Size2((*v)[0].get<int64_t>(), (*v)[1].get<int64_t>());
  throw ctx.error(fmt::format("\"{}\" must be an integer or [h, w], each from {} to {}, got {}",
                              key, min, kMaxFieldValue, show(*v)));
}

// A list of sizes from 1 to kMaxFieldValue (and -1 where `allow_infer`, for reshape).
inline Shape get_shape(const json& obj, const char* key, const Ctx& ctx, bool allow_infer) {
  const json* v = field(obj, key);
  if (!v) throw ctx.error(fmt::format("missing \"{}\"", key));
  Shape s;
  bool ok = v->is_array();
  if (ok)
    for (const json& d : *v) {
      if (!d.is_number_integer()) {
        ok = false;
        break;
      }
      // Clamp values beyond int64 so the range check below reports them.
      s.push_back(d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(INT64_MAX)
                      ? INT64_MAX
                      : d.get<int64_t>());
    }
  if (!ok)
    throw ctx.error(fmt::format("\"{}\" must be a list of integer sizes, got {}", key, show(*v)));
  for (int64_t d : s)
    if (!((d >= 1 && d <= kMaxFieldValue) || (allow_infer && d == -1)))
      throw ctx.error(fmt::format(
          "\"{}\": {} holds {}; every size must be an integer from 1 to "
          "{}{}",
          key, shape_str(s), d, kMaxFieldValue, allow_infer ? " (or -1 once, to infer it)" : ""));
  return s;
}

// a·b, or INT64_MAX when it overflows (every use compares the result with a limit far below).
inline int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}
inline int64_t add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

}  // namespace freight::nn::fields
