#include "common/test_util.h"

#include <fmt/format.h>

#include <cmath>
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

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol,
                                     double atol) {
  if (!actual.defined() || !expected.defined())
    return ::testing::AssertionFailure() << "undefined tensor";
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape())
                                         << " != expected " << shape_str(expected.shape());
  std::vector<double> x = actual.to_double_vector(), y = expected.to_double_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    double tol = atol + rtol * std::fabs(y[i]);
    if (!(std::fabs(x[i] - y[i]) <= tol))  // NaN fails
      return ::testing::AssertionFailure()
             << fmt::format("element {} of {}: {:.10g} vs expected {:.10g} (|diff| {:.3g} > tol "
                            "{:.3g})",
                            i, shape_str(actual.shape()), x[i], y[i], std::fabs(x[i] - y[i]),
                            tol);
  }
  return ::testing::AssertionSuccess();
}

bool have_cuda() { return cuda_available(); }

}  // namespace freight::test
