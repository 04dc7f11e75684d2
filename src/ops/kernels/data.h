// Kernel slots of batch assembly from a dataset held on the device (--data-on-device): one
// launch per tensor gathers the rows of a batch in the epoch's order and normalises them, so a
// batch costs no host work at all.
#pragma once
#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight::kernels {
// inputs [N, ...] (uint8, float32 or int64, contiguous), labels int64 [N, L] (contiguous), order
// int64 [N] (a permutation, data::epoch_order); x [B, ...] and y [B, L] contiguous, B = the
// batch's rows. Row i of the batch is sample order[begin + i]:
//   uint8:   x = fma(float(pixel), scale, shift)     (data::normalisation(mean, std))
//   float32: x = (value − mean) · inv_std
//   int64:   x = the token ids as they are (x int64)
// exactly the arithmetic of data::Loader, so the batches are bit-identical to the loader's.
FREIGHT_KERNEL(gather_batch, void(const Tensor& inputs, const Tensor& labels, const Tensor& order,
                                  int64_t begin, double mean, double std, Tensor& x, Tensor& y));
}  // namespace freight::kernels
