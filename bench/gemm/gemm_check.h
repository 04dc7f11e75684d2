// Validation for the GEMM lab: a float64 reference product and the error bound that a correct
// float32 GEMM must meet, whatever order it sums in. Shared by the CPU and CUDA labs and the test.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gemm_cpu.h"

namespace gemm_lab {

// Fills a matrix with uniform values in [-1, 1) from a fixed-seed generator (splitmix64), so
// every run of the lab multiplies the same matrices.
void fill_uniform(std::vector<float>& v, uint64_t seed);

// The error bound of a dot product of length k in floating point (Higham, Accuracy and Stability
// of Numerical Algorithms, section 3.1): whatever the order of the additions, and whether or not
// multiply-adds are fused,
//   |computed − exact| <= gamma_k · sum_p |a_ip|·|b_pj|,   gamma_k = k·u / (1 − k·u),
// with u = 2^-24 the unit roundoff of float32. When the inputs are first rounded to a shorter
// format with unit roundoff u_in (TF32: 2^-11, BF16: 2^-8, as tensor cores do), each product
// gains a relative error of at most 2·u_in + u_in², which adds to the bound.
double error_bound(int64_t k, double input_roundoff = 0.0);

struct CheckResult {
  double max_error = 0;  // max over checked elements of |c − ref| / sum_p |a_ip·b_pj|
  double bound = 0;      // error_bound for this k
  int64_t worst_i = -1, worst_j = -1;
  int64_t checked = 0;     // number of elements compared
  bool nonfinite = false;  // a NaN or infinity in C
  bool ok() const { return !nonfinite && max_error <= bound; }
  std::string describe() const;  // "max error 3.1e-08 <= bound 7.6e-06 (262144 elements)"
};

// The float64 reference for C = A·B (row-major, as gemm_cpu.h), with sum_p |a_ip·b_pj| for the
// relative error. Either every element, or (for products too large to recompute on the host in
// a few seconds) whole sampled rows and whole sampled columns: every tile edge of a GEMM kernel
// crosses some sampled row or column, and the sample always holds the first and last rows and
// columns.
class Reference {
 public:
  // Every element when m·n·k <= full_limit, sampled rows and columns (at least `samples` of
  // each) otherwise.
  Reference(const float* a, const float* b, Shape s, double full_limit = 1.2e10,
            int64_t samples = 48);
  // Compares C with the reference; only rows < `rows` when given (a variant timed on a band of
  // rows of C leaves the others unwritten).
  CheckResult check(const float* c, double bound, int64_t rows = -1) const;
  bool full() const { return rows_.size() == size_t(s_.m) && cols_.empty(); }
  std::string coverage() const;  // "all 1048576 elements" or "48 rows and 48 columns"

 private:
  Shape s_;
  std::vector<int64_t> rows_, cols_;
  std::vector<double> row_ref_, row_abs_;  // rows_.size() × n
  std::vector<double> col_ref_, col_abs_;  // cols_.size() × m
};

}  // namespace gemm_lab
