#include "training/finite.h"

#include <fmt/format.h>

#include <cmath>

namespace freight::detail {

namespace {
template <class T>
int64_t count_in(const T* p, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += !std::isfinite(p[i]);
  return bad;
}

// bfloat16 is the top half of a float32: NaN or infinite exactly when all 8 exponent bits are
// set. (Read as bits: the CPU backend has no bfloat16 kernels to convert with.)
int64_t count_in_bf16(const uint16_t* p, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += (p[i] & 0x7F80u) == 0x7F80u;
  return bad;
}

int64_t count_non_finite(const Tensor& t) {
  if (!t.defined() || t.numel() == 0 || !is_floating(t.dtype())) return 0;
  Tensor h = t.to(Device::cpu());
  if (h.dtype() == DType::BF16) {
    // State dicts hold packed tensors; a strided bfloat16 view is not a checkpoint's.
    if (!h.is_contiguous()) return 0;
    return count_in_bf16(static_cast<const uint16_t*>(h.data_ptr()), h.numel());
  }
  h = h.contiguous();
  if (h.dtype() == DType::F64) return count_in(h.data<double>(), h.numel());
  return count_in(h.data<float>(), h.numel());
}
}  // namespace

std::vector<NonFinite> non_finite_tensors(const io::NamedTensors& tensors) {
  std::vector<NonFinite> found;
  for (const auto& [name, t] : tensors)
    if (int64_t bad = count_non_finite(t)) found.push_back({name, bad, t.numel()});
  return found;
}

std::string describe_non_finite(const std::vector<NonFinite>& found, size_t max_named) {
  std::string s;
  size_t shown = std::min(found.size(), std::max<size_t>(max_named, 1));
  for (size_t i = 0; i < shown; ++i) {
    const NonFinite& f = found[i];
    if (i) s += i + 1 == shown && shown == found.size() ? " and " : ", ";
    s += f.count == f.numel ? fmt::format("{} (all {} values)", f.name, f.numel)
                            : fmt::format("{} ({} of {} values)", f.name, f.count, f.numel);
  }
  if (shown < found.size()) s += fmt::format(" and {} more", found.size() - shown);
  return s;
}

}  // namespace freight::detail
