#include "data/device_data.h"

#include <fmt/format.h>

#include "data/loader_checks.h"
#include "freight/error.h"
#include "ops/kernels/data.h"

namespace freight::data {

DeviceData::DeviceData(const Dataset& dataset, const LoaderOptions& options) : opt_(options) {
  check_loader_inputs(dataset, options, "--data-on-device");
  n_ = dataset.size();
  inputs_ = dataset.inputs.contiguous().to(options.device);
  labels_ = dataset.labels.to(DType::I64).contiguous().to(options.device);
  int64_t bs = options.batch_size;
  batches_ = options.drop_last ? n_ / bs : (n_ + bs - 1) / bs;
  FREIGHT_CHECK(batches_ > 0,
                fmt::format("--data-on-device: --batch-size {} with drop_last leaves no batch "
                            "of the {} samples of '{}'",
                            bs, n_, dataset.name));
}

void DeviceData::start_epoch(int64_t epoch) {
  std::vector<int64_t> order = epoch_order(n_, opt_.seed, epoch, opt_.shuffle);
  if (!order_.defined()) order_ = Tensor::empty({n_}, DType::I64, opt_.device);
  order_.copy_(Tensor::from_vector(order, {n_}));  // one host-to-device copy per epoch
}

int64_t DeviceData::batch_rows(int64_t b) const {
  FREIGHT_CHECK(b >= 0 && b < batches_,
                fmt::format("--data-on-device: batch {} of {}", b, batches_));
  return shard_of(std::min(opt_.batch_size, n_ - b * opt_.batch_size), opt_.shard, opt_.shards)
      .rows;
}

Shape DeviceData::input_shape(int64_t rows) const {
  Shape s{rows};
  s.insert(s.end(), inputs_.shape().begin() + 1, inputs_.shape().end());
  return s;
}

Shape DeviceData::label_shape(int64_t rows) const {
  Shape s{rows};
  s.insert(s.end(), labels_.shape().begin() + 1, labels_.shape().end());
  return s;
}

DType DeviceData::input_dtype() const {
  return inputs_.dtype() == DType::I64 ? DType::I64 : DType::F32;
}

void DeviceData::gather(int64_t b, Tensor& x, Tensor& y) const {
  FREIGHT_CHECK(order_.defined(), "--data-on-device: gather() before start_epoch()");
  int64_t rows = batch_rows(b);
  FREIGHT_CHECK(x.shape() == input_shape(rows) && y.shape() == label_shape(rows) &&
                    x.dtype() == input_dtype() && y.dtype() == DType::I64 &&
                    x.device() == opt_.device && y.device() == opt_.device,
                fmt::format("--data-on-device: batch {} needs x {} {} and y {} int64 on {}; got "
                            "x {} {}, y {} on {}",
                            b, shape_str(input_shape(rows)), dtype_name(input_dtype()),
                            shape_str(label_shape(rows)), opt_.device.str(), shape_str(x.shape()),
                            dtype_name(x.dtype()), shape_str(y.shape()), x.device().str()));
  int64_t first =
      b * opt_.batch_size +
      shard_of(std::min(opt_.batch_size, n_ - b * opt_.batch_size), opt_.shard, opt_.shards).offset;
  if (rows > 0)
    kernels::gather_batch(opt_.device.type, inputs_, labels_, order_, first, opt_.mean, opt_.std, x,
                          y);
}

Batch DeviceData::batch(int64_t b) const {
  int64_t rows = batch_rows(b);
  Batch out;
  out.index = b;
  out.inputs = Tensor::empty(input_shape(rows), input_dtype(), opt_.device);
  out.labels = Tensor::empty(label_shape(rows), DType::I64, opt_.device);
  gather(b, out.inputs, out.labels);
  return out;
}

size_t DeviceData::bytes() const {
  return inputs_.nbytes() + labels_.nbytes() + (order_.defined() ? order_.nbytes() : 0);
}

}  // namespace freight::data
