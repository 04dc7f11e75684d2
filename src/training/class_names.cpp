#include "training/class_names.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "freight/error.h"

namespace freight::detail {

namespace {
constexpr const char* kKey = "class_names";

std::string some(const std::vector<std::string>& names) {
  std::string s;
  const size_t shown = std::min<size_t>(names.size(), 8);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += ", ...";
  return s;
}
}  // namespace

void put_class_names(io::Metadata& meta, const std::vector<std::string>& names) {
  if (!names.empty()) meta[kKey] = nlohmann::json(names).dump();
}

std::vector<std::string> class_names_of(const io::Metadata& meta, const std::string& file,
                                        int64_t classes) {
  auto it = meta.find(kKey);
  if (it == meta.end()) return {};
  nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
  bool ok = j.is_array();
  for (size_t i = 0; ok && i < j.size(); ++i) ok = j[i].is_string();
  FREIGHT_CHECK(ok, fmt::format("checkpoint '{}': metadata \"{}\" is not a JSON array of "
                                "strings",
                                file, kKey));
  std::vector<std::string> names = j.get<std::vector<std::string>>();
  // Class i is the model's output i: a name beyond its outputs could never be predicted, and
  // the data it was trained on had no more classes than outputs (load_dataset checks).
  FREIGHT_CHECK(int64_t(names.size()) <= classes,
                fmt::format("checkpoint '{}': metadata \"{}\" names {} classes ({}) but its "
                            "model has {} outputs",
                            file, kKey, names.size(), some(names), classes));
  std::unordered_map<std::string_view, size_t> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    auto [at, fresh] = seen.emplace(names[i], i);
    FREIGHT_CHECK(fresh, fmt::format("checkpoint '{}': metadata \"{}\" names class '{}' twice "
                                     "(classes {} and {}): a prediction of either would read "
                                     "the same name",
                                     file, kKey, names[i], at->second, i));
  }
  return names;
}

void check_same_classes(const std::vector<std::string>& saved, const std::vector<std::string>& data,
                        const std::string& checkpoint, const std::string& data_name) {
  if (saved.empty() || data.empty() || saved == data) return;
  size_t i = 0;
  while (i < saved.size() && i < data.size() && saved[i] == data[i]) ++i;
  std::string first = i < saved.size() && i < data.size()
                          ? fmt::format("class {} is '{}' in the checkpoint but '{}' in the data",
                                        i, saved[i], data[i])
                          : fmt::format("the first {} agree, then the {} has more", i,
                                        saved.size() > data.size() ? "checkpoint" : "data");
  throw Error(fmt::format(
      "checkpoint '{}' was trained on {} classes ({}) but --data {} has {} ({}): {}; its "
      "predictions would be read with the wrong names (give the data it was trained on)",
      checkpoint, saved.size(), some(saved), data_name, data.size(), some(data), first));
}

}  // namespace freight::detail
