#include "rank_test_util.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "dist/communicator.h"
#include "freight/error.h"

namespace freight::test {

namespace fs = std::filesystem;

SharedTempDir::SharedTempDir(const std::string& tag) {
  char buf[512] = {};
  if (dist::world().rank == 0) {
    std::string p =
        (fs::temp_directory_path() / ("freight_" + tag + "_" + std::to_string(getpid()))).string();
    fs::remove_all(p);
    fs::create_directories(p);
    std::strncpy(buf, p.c_str(), sizeof buf - 1);
  }
  dist::broadcast_bytes(buf, sizeof buf, 0, "the test's directory");
  path_ = buf;
  dist::barrier("the test's directory");
}

SharedTempDir::~SharedTempDir() {
  dist::barrier("the end of the test's directory");
  if (dist::world().rank == 0) {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
}

Tensor from_rank0(const Tensor& t) {
  Tensor c = t.contiguous().clone();
  dist::broadcast_bytes(c.data_ptr(), c.nbytes(), 0, "a test's broadcast");
  return c;
}

double max_abs_difference(const std::vector<std::pair<std::string, Tensor>>& a,
                          const std::vector<std::pair<std::string, Tensor>>& b) {
  FREIGHT_CHECK(a.size() == b.size(), "max_abs_difference: different tensor lists");
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    FREIGHT_CHECK(a[i].first == b[i].first && a[i].second.shape() == b[i].second.shape(),
                  "max_abs_difference: " + a[i].first + " against " + b[i].first);
    std::vector<double> x = a[i].second.to_double_vector(), y = b[i].second.to_double_vector();
    for (size_t k = 0; k < x.size(); ++k) m = std::max(m, std::abs(x[k] - y[k]));
  }
  return m;
}

double max_abs_value(const std::vector<std::pair<std::string, Tensor>>& a) {
  double m = 0;
  for (const auto& [name, t] : a)
    for (double v : t.to_double_vector()) m = std::max(m, std::abs(v));
  return m;
}

}  // namespace freight::test
