// Thread settings and build information of the CPU backend.
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include "freight/runtime.h"

namespace freight {

void set_num_threads(int n) {
  if (n <= 0) return;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

std::string build_info() {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::string s = fmt::format("OpenBLAS {} (kernels: {}{}), {} threads, g++ {}.{}",
                              openblas_get_config(), openblas_get_corename(),
                              coretype ? fmt::format(", forced by OPENBLAS_CORETYPE={}", coretype)
                                       : std::string(),
                              num_threads(), __GNUC__, __GNUC_MINOR__);
#if FREIGHT_WITH_CUDA
  s += ", CUDA backend built";
#else
  s += ", no CUDA backend";
#endif
  return s;
}

}  // namespace freight
