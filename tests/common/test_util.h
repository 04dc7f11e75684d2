// Helpers for tests: comparisons with stated tolerances, random inputs.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "freight/freight.h"

namespace freight::test {

// ‖a − b‖₂ / max(‖b‖₂, tiny); +inf when either holds a NaN (NaN never passes).
double relative_error(const Tensor& a, const Tensor& b);

// How far a device's float32 result may be from the CPU's float64 result of the same
// computation: `tol`, or 4x the CPU's own float32 error against float64 when that is larger.
// An ill-conditioned case leaves only rounding noise in float32 on every device (batch norm's
// input gradient over two values per channel is pure cancellation: its true value is
// eps/(d^2 + eps) times dy's difference), and two float32 devices then differ by how they
// round (nvcc contracts a*b + c into one FMA, the CPU build does not), not by a defect. An H100
// showed it: 3.6% between GPU and CPU in float32 there, with every well-conditioned case
// within 1e-4; the emulation, compiled with FMAs, gives the same 3.6%.
double float32_error_bound(double tol, const Tensor& cpu_f32, const Tensor& cpu_f64);

// The same for a float64 result compared with the CPU's float64 (there is no wider reference):
// `tol`, or 4x the CPU's float32 error scaled by the ratio of the unit roundoffs (2^-53/2^-24),
// the error float64 has where the case amplifies rounding as much as it does in float32.
double float64_error_bound(double tol, const Tensor& cpu_f32, const Tensor& cpu_f64);
// Largest |a − b| over elements, +inf on NaN.
double max_abs_diff(const Tensor& a, const Tensor& b);

// C = alpha·op(A)·op(B) + beta·C0 in float64 from the float32 operands, row-major [m, n]: the
// reference of the CPU GEMM's tests (ta, tb: A is [k, m], B is [n, k]; beta = 0 ignores C0).
std::vector<double> gemm_reference(int64_t m, int64_t n, int64_t k, bool ta, bool tb, double alpha,
                                   double beta, const Tensor& a, const Tensor& b, const Tensor& c0);

// Elements of a float32 GEMM result `got` ([m, n]) off gemm_reference's `want` by more than
// float32 sums of k unit-normal products allow: about 2^-24·√k·|terms|, times |alpha|.
int64_t gemm_mismatches(int64_t k, double alpha, const Tensor& got,
                        const std::vector<double>& want);

// Passes when shapes match and every element satisfies |a − b| <= atol + rtol·|b|.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol,
                                     double atol);

// A GPU is usable by this process (the CUDA backend is built and a device answers).
bool have_cuda();

// The message of the freight::Error that `fn` throws ("" when it throws none).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// `s` contains `part` (for checking that an error message names the op and shapes).
inline bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A shell command's exit status (128 + the signal when killed, -1 when it could not start) and
// what it printed, stdout and stderr together.
struct ShellRun {
  int status = -1;
  std::string output;
};
ShellRun shell(const std::string& cmd);

// Expects `r`, the run of `freight args`, to be a refusal: exit 1 (a freight::Error) with
// Freight's message, no internal error, and every fragment somewhere in the output.
inline void expect_refusal(const ShellRun& r, const std::string& args,
                           const std::vector<std::string>& fragments) {
  EXPECT_EQ(r.status, 1) << args << "\n" << r.output;
  EXPECT_TRUE(has(r.output, "freight: error:")) << r.output;
  EXPECT_FALSE(has(r.output, "internal error")) << r.output;
  for (const std::string& f : fragments)
    EXPECT_TRUE(has(r.output, f)) << "missing '" << f << "' in:\n" << r.output;
}

// Points FREIGHT_PEAKS_FILE at a fresh file in a private directory (named after `tag` and the
// process) while it lives, so a suite measures the device peaks once for itself; then puts the
// old value back and removes the directory.
class ScopedPeaksFile {
 public:
  explicit ScopedPeaksFile(const std::string& tag);
  ~ScopedPeaksFile();
  ScopedPeaksFile(const ScopedPeaksFile&) = delete;
  ScopedPeaksFile& operator=(const ScopedPeaksFile&) = delete;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_, old_;
  bool had_old_ = false;
};

}  // namespace freight::test

#define FREIGHT_SKIP_WITHOUT_CUDA()                                            \
  do {                                                                         \
    std::string why_;                                                          \
    if (!::freight::cuda_available(&why_)) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)
