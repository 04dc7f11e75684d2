#include "common/test_util.h"

#include <fmt/format.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>

namespace freight::test {

double relative_error(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  if (x.size() != y.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) return std::numeric_limits<double>::infinity();
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

double float32_error_bound(double tol, const Tensor& cpu_f32, const Tensor& cpu_f64) {
  return std::max(tol, 4.0 * relative_error(cpu_f32, cpu_f64));
}

double float64_error_bound(double tol, const Tensor& cpu_f32, const Tensor& cpu_f64) {
  return std::max(tol, 4.0 * std::ldexp(relative_error(cpu_f32, cpu_f64), 24 - 53));
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  if (x.size() != y.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) return std::numeric_limits<double>::infinity();
    m = std::max(m, std::fabs(x[i] - y[i]));
  }
  return m;
}

std::vector<double> gemm_reference(int64_t m, int64_t n, int64_t k, bool ta, bool tb, double alpha,
                                   double beta, const Tensor& a, const Tensor& b,
                                   const Tensor& c0) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const float* pc = c0.data<float>();
  std::vector<double> out(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s +=
            double(ta ? pa[p * m + i] : pa[i * k + p]) * double(tb ? pb[j * k + p] : pb[p * n + j]);
      out[size_t(i * n + j)] = alpha * s + (beta != 0 ? beta * double(pc[i * n + j]) : 0.0);
    }
  return out;
}

int64_t gemm_mismatches(int64_t k, double alpha, const Tensor& got,
                        const std::vector<double>& want) {
  const double tol = 1e-5 * std::sqrt(double(k)) * std::max(1.0, std::fabs(alpha));
  const float* g = got.data<float>();
  int64_t bad = 0;
  for (size_t e = 0; e < want.size(); ++e)
    if (!(std::fabs(double(g[e]) - want[e]) <= tol * (1 + std::fabs(want[e])))) ++bad;
  return bad;
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol,
                                     double atol) {
  if (!actual.defined() || !expected.defined())
    return ::testing::AssertionFailure() << "undefined tensor";
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " != expected "
                                         << shape_str(expected.shape());
  std::vector<double> x = actual.to_double_vector(), y = expected.to_double_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    double tol = atol + rtol * std::fabs(y[i]);
    if (!(std::fabs(x[i] - y[i]) <= tol))  // NaN fails
      return ::testing::AssertionFailure() << fmt::format(
                 "element {} of {}: {:.10g} vs expected {:.10g} (|diff| {:.3g} > tol "
                 "{:.3g})",
                 i, shape_str(actual.shape()), x[i], y[i], std::fabs(x[i] - y[i]), tol);
  }
  return ::testing::AssertionSuccess();
}

bool have_cuda() {
  return cuda_available();
}

ShellRun shell(const std::string& cmd) {
  ShellRun r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

ScopedPeaksFile::ScopedPeaksFile(const std::string& tag) {
  namespace fs = std::filesystem;
  dir_ =
      (fs::temp_directory_path() / ("freight_" + tag + "_" + std::to_string(::getpid()))).string();
  fs::create_directories(dir_);
  if (const char* old = std::getenv("FREIGHT_PEAKS_FILE")) old_ = old, had_old_ = true;
  ::setenv("FREIGHT_PEAKS_FILE", (fs::path(dir_) / "peaks.json").c_str(), 1);
}

ScopedPeaksFile::~ScopedPeaksFile() {
  if (had_old_)
    ::setenv("FREIGHT_PEAKS_FILE", old_.c_str(), 1);
  else
    ::unsetenv("FREIGHT_PEAKS_FILE");
  std::filesystem::remove_all(dir_);
}

}  // namespace freight::test
