// CPU kernel of the training metrics (ops/kernels/metrics.h): the argmax rule of argmax_axis
// (ops/kernels/argmax_rule.h), one pass over the rows.
#include <fmt/format.h>

#include "backend/cpu/dispatch.h"
#include "ops/kernels/argmax_rule.h"
#include "ops/kernels/metrics.h"

namespace freight::cpu {
namespace {

void accumulate_metrics_cpu(const Tensor& output, const Tensor& labels, const Tensor& loss,
                            double weight, Tensor& sums) {
  FREIGHT_CHECK(output.dim() == 2 && output.is_contiguous() && labels.is_contiguous() &&
                    labels.dtype() == DType::I64 && labels.numel() == output.size(0) &&
                    loss.numel() == 1 && loss.dtype() == output.dtype() &&
                    sums.dtype() == DType::F64 && sums.numel() == 2 && sums.is_contiguous(),
                fmt::format("accumulate_metrics (cpu): expects output [R, C], int64 labels [R], a "
                            "scalar loss and float64 sums [2]; got {}, {}, {}, {}",
                            shape_str(output.shape()), shape_str(labels.shape()),
                            shape_str(loss.shape()), shape_str(sums.shape())));
  int64_t rows = output.size(0), c = output.size(1);
  const int64_t* y = labels.data<int64_t>();
  double* s = sums.data<double>();
  dispatch_floating(output.dtype(), "accumulate_metrics", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(output.data_ptr());
    int64_t hits = 0;
    for (int64_t r = 0; c > 0 && r < rows; ++r) {
      const T* row = x + r * c;
      int64_t best = 0;
      T bv = row[0];
      for (int64_t j = 1; j < c; ++j)
        if (argmax_replaces(row[j], bv)) bv = row[j], best = j;
      hits += best == y[r];
    }
    s[0] += double(*static_cast<const T*>(loss.data_ptr())) * weight;
    s[1] += double(hits);
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::accumulate_metrics, CPU, accumulate_metrics_cpu);

}  // namespace freight::cpu
