#include "gemm_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace gemm_lab {

void fill_uniform(std::vector<float>& v, uint64_t seed) {
  uint64_t state = seed;
  for (float& x : v) {
    state += 0x9e3779b97f4a7c15ull;  // splitmix64
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    x = float(double(z >> 40) / double(1ull << 24) * 2.0 - 1.0);  // 24 random bits: exact
  }
}

double error_bound(int64_t k, double input_roundoff) {
  const double u = std::ldexp(1.0, -24);
  const double ku = double(std::max<int64_t>(k, 1)) * u;
  return ku / (1.0 - ku) + 2.0 * input_roundoff + input_roundoff * input_roundoff;
}

std::string CheckResult::describe() const {
  char buf[200];
  if (nonfinite) {
    std::snprintf(buf, sizeof buf, "non-finite value at C[%lld][%lld]", (long long)worst_i,
                  (long long)worst_j);
  } else {
    std::snprintf(buf, sizeof buf, "max error %.2e %s bound %.2e (worst at C[%lld][%lld])",
                  max_error, max_error <= bound ? "<=" : "EXCEEDS", bound, (long long)worst_i,
                  (long long)worst_j);
  }
  return buf;
}

namespace {

// Evenly spread indices in [0, count), always with 0 and count − 1.
std::vector<int64_t> spread(int64_t count, int64_t samples) {
  std::vector<int64_t> v;
  if (samples >= count) {
    v.resize(size_t(count));
    std::iota(v.begin(), v.end(), int64_t(0));
    return v;
  }
  for (int64_t q = 0; q < samples; ++q) v.push_back(q * (count - 1) / (samples - 1));
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

Reference::Reference(const float* a, const float* b, Shape s, double full_limit, int64_t samples)
    : s_(s) {
  const bool full = double(s.m) * double(s.n) * double(s.k) <= full_limit;
  rows_ = full ? spread(s.m, s.m) : spread(s.m, samples);
  if (!full) cols_ = spread(s.n, samples);
  // Rows: i-k-j in float64, so the inner loop is unit-stride and vectorises; rows in parallel.
  row_ref_.assign(rows_.size() * size_t(s.n), 0.0);
  row_abs_.assign(rows_.size() * size_t(s.n), 0.0);
  // Threads only for products worth waking them for (a test's tiny products run inline).
  const bool big = double(s.m) * double(s.n) * double(s.k) > 1e7;
#pragma omp parallel for schedule(dynamic, 4) if (big)
  for (int64_t r = 0; r < int64_t(rows_.size()); ++r) {
    double* ref = &row_ref_[size_t(r * s.n)];
    double* abs = &row_abs_[size_t(r * s.n)];
    const float* arow = a + rows_[size_t(r)] * s.k;
    for (int64_t p = 0; p < s.k; ++p) {
      const double x = arow[p], ax = std::fabs(x);
      const float* brow = b + p * s.n;
      for (int64_t j = 0; j < s.n; ++j) {
        ref[j] += x * double(brow[j]);
        abs[j] += ax * std::fabs(double(brow[j]));
      }
    }
  }
  // Sampled columns: one dot product per element.
  col_ref_.assign(cols_.size() * size_t(s.m), 0.0);
  col_abs_.assign(cols_.size() * size_t(s.m), 0.0);
#pragma omp parallel for schedule(dynamic, 64) if (big)
  for (int64_t i = 0; i < s.m; ++i)
    for (size_t q = 0; q < cols_.size(); ++q) {
      double sum = 0, abs = 0;
      for (int64_t p = 0; p < s.k; ++p) {
        const double x = a[i * s.k + p], y = b[p * s.n + cols_[q]];
        sum += x * y;
        abs += std::fabs(x * y);
      }
      col_ref_[q * size_t(s.m) + size_t(i)] = sum;
      col_abs_[q * size_t(s.m) + size_t(i)] = abs;
    }
}

CheckResult Reference::check(const float* c, double bound, int64_t rows) const {
  if (rows < 0 || rows > s_.m) rows = s_.m;
  CheckResult res;
  res.bound = bound;
  auto visit = [&](int64_t i, int64_t j, double ref, double abs) {
    const double v = c[i * s_.n + j];
    ++res.checked;
    if (!std::isfinite(v)) {
      if (!res.nonfinite) res.worst_i = i, res.worst_j = j;
      res.nonfinite = true;
      return;
    }
    // Relative to sum |a·b|; when that is 0 (a zero row or column) C must be exactly 0.
    const double err = abs > 0 ? std::fabs(v - ref) / abs : (v == 0 ? 0.0 : INFINITY);
    if (err > res.max_error || res.worst_i < 0) {
      if (!res.nonfinite) res.worst_i = i, res.worst_j = j;
      res.max_error = std::max(res.max_error, err);
    }
  };
  for (size_t r = 0; r < rows_.size() && rows_[r] < rows; ++r)
    for (int64_t j = 0; j < s_.n; ++j)
      visit(rows_[r], j, row_ref_[r * size_t(s_.n) + size_t(j)],
            row_abs_[r * size_t(s_.n) + size_t(j)]);
  for (size_t q = 0; q < cols_.size(); ++q)
    for (int64_t i = 0; i < rows; ++i)
      visit(i, cols_[q], col_ref_[q * size_t(s_.m) + size_t(i)],
            col_abs_[q * size_t(s_.m) + size_t(i)]);
  return res;
}

std::string Reference::coverage() const {
  if (full()) return "all " + std::to_string(s_.m * s_.n) + " elements";
  return std::to_string(rows_.size()) + " whole rows and " + std::to_string(cols_.size()) +
         " whole columns";
}

}  // namespace gemm_lab
