// BLIS through dlopen (see blis_dl.h). blis.h is included for its types and prototypes only
// (bli_sgemm's signature, trans_t, dim_t): nothing here is linked against BLIS, and this file
// must not see OpenBLAS's cblas.h (blis.h declares its own CBLAS).
#include "blis_dl.h"

#include <dlfcn.h>

#include <stdexcept>

#if FREIGHT_HAVE_BLIS_H
#include <blis.h>
#endif

namespace freight_bench {

#if FREIGHT_HAVE_BLIS_H
namespace {
using SgemmFn = decltype(&bli_sgemm);
using SetThreadsFn = decltype(&bli_thread_set_num_threads);
using VersionFn = decltype(&bli_info_get_version_str);
constexpr const char* kLibrary = "libblis.so.4";
}  // namespace

Blis::Blis() {
  void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!lib) {
    const char* err = dlerror();
    status_ = std::string("not installed (") + (err ? err : kLibrary) + ")";
    return;
  }
  void* sgemm = dlsym(lib, "bli_sgemm");
  auto set_threads = reinterpret_cast<SetThreadsFn>(dlsym(lib, "bli_thread_set_num_threads"));
  auto version = reinterpret_cast<VersionFn>(dlsym(lib, "bli_info_get_version_str"));
  if (!sgemm || !set_threads || !version) {
    status_ = std::string("not usable (") + kLibrary + " lacks bli_sgemm, " +
              "bli_thread_set_num_threads or bli_info_get_version_str)";
    return;  // the handle stays open: harmless, and a half-loaded library is not unloaded
  }
  // One thread per call: the callers run one GEMM per image on each of their threads.
  set_threads(1);
  status_ = std::string(version()) + " (" + kLibrary + ", dlopen RTLD_LOCAL|RTLD_DEEPBIND)";
  sgemm_ = sgemm;
}

void Blis::sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) const {
  if (!sgemm_) throw std::logic_error("BLIS is not loaded: " + status_);
  float one = 1;
  // Row-major storage: rows lda (ldb, ldc) apart, columns adjacent. With transposition BLIS
  // reads the stored matrix through the same strides and uses its transpose.
  reinterpret_cast<SgemmFn>(sgemm_)(
      ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m, n, k,
      &one, const_cast<float*>(a), lda, 1, const_cast<float*>(b), ldb, 1, &beta, c, ldc, 1);
}
#else
Blis::Blis() : status_("not built (blis.h not found: Debian's libblis-dev)") {}

void Blis::sgemm(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                 int64_t, float, float*, int64_t) const {
  throw std::logic_error("BLIS is not loaded: " + status_);
}
#endif

const Blis& Blis::get() {
  static const Blis blis;
  return blis;
}

}  // namespace freight_bench
