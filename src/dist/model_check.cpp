#include "dist/model_check.h"

#include <fmt/format.h>

#include <map>
#include <sstream>

#include "dist/communicator.h"
#include "freight/autograd.h"
#include "freight/dist.h"
#include "freight/error.h"

namespace freight::dist {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// "name" -> "dtype [shape]" (the settings line under the key "settings").
std::map<std::string, std::string> entries(const std::string& text,
                                           std::vector<std::string>& order) {
  std::map<std::string, std::string> m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t sp = line.find(' ');
    std::string key = line.substr(0, sp), rest = sp == std::string::npos ? "" : line.substr(sp + 1);
    order.push_back(key);
    m[key] = rest;
  }
  return m;
}

// The first difference of `other` (rank r's description) from rank 0's, in words.
std::string first_difference(const std::string& zero, const std::string& other, int r) {
  std::vector<std::string> zero_order, other_order;
  auto z = entries(zero, zero_order), o = entries(other, other_order);
  std::string head = fmt::format("rank {} built a different model than rank 0", r);
  for (const std::string& k : zero_order) {
    auto it = o.find(k);
    if (it == o.end()) {
      if (k == "settings") break;
      return fmt::format("{}: it has no '{}' ({} on rank 0)", head, k, z[k]);
    }
    if (it->second != z[k]) {
      if (k == "settings")
        return fmt::format("rank {} runs with other settings than rank 0: {} there, {} on rank 0",
                           r, it->second, z[k]);
      return fmt::format("{}: '{}' is {} there, {} on rank 0", head, k, it->second, z[k]);
    }
  }
  for (const std::string& k : other_order)
    if (!z.count(k)) return fmt::format("{}: it has '{}' ({}), rank 0 has not", head, k, o[k]);
  return head;
}

}  // namespace

std::string describe_model(const NamedTensorList& state, const std::string& settings) {
  std::string s;
  for (const auto& [name, t] : state)
    s += fmt::format("{} {} {}\n", name, dtype_name(t.dtype()), shape_str(t.shape()));
  s += "settings " + settings + "\n";
  return s;
}

void check_same_model(const NamedTensorList& state, const std::string& settings) {
  if (world().size <= 1) return;
  std::string mine = describe_model(state, settings);
  std::vector<double> h{double(fnv1a(mine) >> 11), 0};
  h[1] = -h[0];
  // max(h) == -max(-h) == min(h) exactly when every rank has the same hash.
  all_reduce_max(h, "the same-model check at start");
  if (h[0] == -h[1]) return;
  std::vector<std::string> all = all_gather_text(mine, "the same-model check at start");
  for (int r = 1; r < int(all.size()); ++r)
    if (all[size_t(r)] != all[0])
      throw Error(first_difference(all[0], all[size_t(r)], r) +
                  ": every rank must run the same model file and settings");
  throw Error("the ranks built different models (their descriptions hash differently)");
}

void broadcast_from_rank0(const NamedTensorList& state, const std::string& what) {
  if (world().size <= 1) return;
  for (const auto& [name, t] : state) {
    FREIGHT_CHECK(t.is_contiguous(), fmt::format("{}: '{}' must be contiguous", what, name));
    if (t.device().is_cpu()) {
      broadcast_bytes(t.data_ptr(), t.nbytes(), 0, fmt::format("{} ('{}')", what, name));
    } else {
      // A GPU's tensor goes through host memory: the weights are sent once at start (and the
      // BatchNorm buffers before an evaluation), so MPI's host path is enough.
      Tensor host = t.to(Device::cpu()).contiguous();
      broadcast_bytes(host.data_ptr(), host.nbytes(), 0, fmt::format("{} ('{}')", what, name));
      Tensor target = t;
      target.copy_(host);
    }
  }
}

}  // namespace freight::dist
