// BLIS, loaded at run time for freight_conv_libs's GEMM columns. BLIS and OpenBLAS both export
// the BLAS and CBLAS symbols (sgemm_, cblas_sgemm): linked into one program, one library's would
// answer the other's callers. So BLIS is never linked: blis_dl.cpp opens libblis.so.4 with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND), which keeps its symbols out of the program's namespace
// and binds BLIS's own calls to BLIS, and calls bli_sgemm through a pointer.
#pragma once
#include <cstdint>
#include <string>

namespace freight_bench {

class Blis {
 public:
  // The loaded library; when absent, ok() is false and status() says why.
  static const Blis& get();

  bool ok() const { return sgemm_ != nullptr; }
  // "0.9.0 (libblis.so.4)", or why BLIS is not there: "not built (...)", "not installed (...)".
  const std::string& status() const { return status_; }

  // Row-major C[m, n] = op(A)[m, k] · op(B)[k, n] + beta · C (op: transposed when ta / tb), on
  // the calling thread: BLIS is set to one thread, the callers spread images over threads.
  void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc) const;

 private:
  Blis();
  void* sgemm_ = nullptr;  // bli_sgemm (its type is blis.h's, known to blis_dl.cpp only)
  std::string status_;
};

}  // namespace freight_bench
