// Tensor construction, metadata, copies and host access. The methods that are ops, recorded on
// the autograd graph (clone, contiguous, reshape, transpose, ...), are defined with the shape ops
// in src/ops/shape.cpp: the core needs nothing from the ops layer above it.
#include "freight/tensor.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/autograd_node.h"
#include "core/backend.h"
#include "core/core_kernels.h"
#include "core/philox.h"
#include "core/tensor_impl.h"
#include "freight/error.h"
#include "freight/random.h"
#include "freight/runtime.h"

namespace freight {

// ---------------------------------------------------------------- storage and impl
Storage::Storage(size_t bytes, Device dev) : nbytes(bytes), device(dev) {
  if (bytes == 0) return;
  DeviceBackend& be = backend_for(dev.type);
  data = be.allocate(bytes, dev.index);
  if (poison_allocations()) be.memset(data, 0xFF, bytes, dev.index);  // 0xFF.. is a NaN
}

Storage::Storage(size_t bytes, Device cpu, int pinned_for_gpu)
    : nbytes(bytes), device(cpu), pinned_for(pinned_for_gpu) {
  if (bytes == 0) return;
  data = backend_for(DeviceType::CUDA).allocate_pinned(bytes, pinned_for);
  if (poison_allocations()) std::memset(data, 0xFF, bytes);
}

Storage::Storage(void* external, size_t bytes, Device dev, std::function<void()> on_release)
    : data(external), nbytes(bytes), device(dev), release(std::move(on_release)) {}

Storage::~Storage() {
  if (release) {
    // GPU memory lent by another library: Freight's queued kernels may still use it, and its
    // owner may hand it to other work as soon as it is back. (A destructor must not throw.)
    if (device.is_cuda()) {
      try {
        backend_for(device.type).synchronize(device.index);
      } catch (...) {
      }
    }
    release();
    return;
  }
  if (!data) return;
  if (pinned_for >= 0)
    backend_for(DeviceType::CUDA).deallocate_pinned(data, nbytes, pinned_for);
  else
    backend_for(device.type).deallocate(data, nbytes, device.index);
}

void TensorImpl::recompute_layout() {
  numel = shape_numel(shape);
  contiguous = true;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) {
      contiguous = false;
      break;
    }
    expected *= shape[i];
  }
}

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->dtype = base.impl()->dtype;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->recompute_layout();
  return Tensor(std::move(impl));
}

namespace {
// Checks a shape for a new tensor and returns its size in bytes. The product is checked: a shape
// whose byte count does not fit (a [2^62] float32 tensor is 2^64 bytes) would otherwise wrap to a
// small allocation that the tensor then overruns.
size_t checked_nbytes(const Shape& shape, DType dtype, const char* what) {
  for (int64_t d : shape)
    FREIGHT_CHECK(d >= 0,
                  fmt::format("{}: negative dimension in shape {}", what, shape_str(shape)));
  int64_t bytes = 0;
  FREIGHT_CHECK(!__builtin_mul_overflow(shape_numel(shape), int64_t(dtype_size(dtype)), &bytes),
                fmt::format("{}: a {} tensor of shape {} would need more bytes than a 64-bit "
                            "size can hold",
                            what, dtype_name(dtype), shape_str(shape)));
  return size_t(bytes);
}

const TensorImpl& checked(const std::shared_ptr<TensorImpl>& impl) {
  FREIGHT_CHECK(impl != nullptr, "use of an undefined (default-constructed) Tensor");
  return *impl;
}

template <class T>
Tensor from_host(const std::vector<T>& values, const Shape& shape, Device device) {
  FREIGHT_CHECK(int64_t(values.size()) == shape_numel(shape),
                fmt::format("Tensor::from_vector: {} values for shape {} ({} elements)",
                            values.size(), shape_str(shape), shape_numel(shape)));
  Tensor cpu = Tensor::empty(shape, dtype_of<T>(), Device::cpu());
  if (!values.empty()) std::memcpy(cpu.data_ptr(), values.data(), values.size() * sizeof(T));
  return cpu.to(device);
}
}  // namespace

// ---------------------------------------------------------------- construction
Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  size_t nbytes = checked_nbytes(shape, dtype, "Tensor::empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = dtype;
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->numel = shape_numel(shape);
  impl->contiguous = true;
  impl->storage = std::make_shared<Storage>(nbytes, device);
  return Tensor(std::move(impl));
}

Tensor empty_pinned(const Shape& shape, DType dtype, Device gpu) {
  size_t nbytes = checked_nbytes(shape, dtype, "empty_pinned");
  FREIGHT_CHECK(gpu.is_cuda(), fmt::format("empty_pinned: pinned memory is allocated for a CUDA "
                                           "device, not {}",
                                           gpu.str()));
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = dtype;
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->numel = shape_numel(shape);
  impl->contiguous = true;
  impl->storage = std::make_shared<Storage>(nbytes, Device::cpu(), gpu.index);
  return Tensor(std::move(impl));
}

std::function<Tensor(const Shape&, DType)> pinned_host_allocator(Device gpu) {
  return [gpu](const Shape& shape, DType dtype) { return empty_pinned(shape, dtype, gpu); };
}

bool is_pinned(const Tensor& t) {
  return t.defined() && t.impl()->storage->pinned_for >= 0;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::scalar(double value, DType dtype, Device device) {
  return full({}, value, dtype, device);
}

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& s, Device d) {
  return from_host(v, s, d);
}
Tensor Tensor::from_vector(const std::vector<double>& v, const Shape& s, Device d) {
  return from_host(v, s, d);
}
Tensor Tensor::from_vector(const std::vector<int64_t>& v, const Shape& s, Device d) {
  return from_host(v, s, d);
}

// Random tensors are drawn on the host from the Philox stream and copied: initialisation is rare
// and this keeps the values identical on every device for the same seed.
Tensor Tensor::uniform(const Shape& shape, double lo, double hi, DType dtype, Device device,
                       Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  int64_t n = shape_numel(shape);
  std::vector<double> v(n);
  uint64_t base = g.reserve(uint64_t(n + 1) / 2 + 1);
  for (int64_t i = 0; i < n; ++i) {
    // Two 32-bit lanes per double: draw i uses lanes 2(i%2), 2(i%2)+1 of counter base + i/2.
    philox::U32x4 r = philox::draw(g.seed(), base + uint64_t(i) / 2);
    int lane = int(i % 2) * 2;
    v[i] = lo + (hi - lo) * philox::to_unit_double(r.v[lane], r.v[lane + 1]);
  }
  return Tensor::from_vector(v, shape, Device::cpu()).to(dtype).to(device);
}

Tensor Tensor::normal(const Shape& shape, double mean, double std, DType dtype, Device device,
                      Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  int64_t n = shape_numel(shape);
  std::vector<double> v(n);
  uint64_t base = g.reserve(uint64_t(n + 1) / 2 + 1);
  for (int64_t i = 0; i < n; i += 2) {
    // Box-Muller: two uniforms from one counter give two independent normals.
    philox::U32x4 r = philox::draw(g.seed(), base + uint64_t(i) / 2);
    double u1 = 1.0 - philox::to_unit_double(r.v[0], r.v[1]);  // (0, 1]
    double u2 = philox::to_unit_double(r.v[2], r.v[3]);
    double rad = std::sqrt(-2.0 * std::log(u1));
    v[i] = mean + std * rad * std::cos(2.0 * M_PI * u2);
    if (i + 1 < n) v[i + 1] = mean + std * rad * std::sin(2.0 * M_PI * u2);
  }
  return Tensor::from_vector(v, shape, Device::cpu()).to(dtype).to(device);
}

Tensor Tensor::randint(const Shape& shape, int64_t lo, int64_t hi, Device device, Generator* gen) {
  FREIGHT_CHECK(hi > lo, fmt::format("Tensor::randint: empty range [{}, {})", lo, hi));
  Generator& g = gen ? *gen : default_generator();
  int64_t n = shape_numel(shape);
  std::vector<int64_t> v(n);
  uint64_t base = g.reserve(uint64_t(n + 1) / 2 + 1);
  uint64_t span = uint64_t(hi - lo);
  for (int64_t i = 0; i < n; ++i) {
    philox::U32x4 r = philox::draw(g.seed(), base + uint64_t(i) / 2);
    int lane = int(i % 2) * 2;
    uint64_t bits = (uint64_t(r.v[lane]) << 32) | r.v[lane + 1];
    v[i] = lo + int64_t(bits % span);
  }
  return Tensor::from_vector(v, shape, device);
}

// ---------------------------------------------------------------- metadata
const Shape& Tensor::shape() const {
  return checked(impl_).shape;
}
const Shape& Tensor::strides() const {
  return checked(impl_).strides;
}
int64_t Tensor::dim() const {
  return int64_t(checked(impl_).shape.size());
}
int64_t Tensor::size(int64_t d) const {
  return shape()[wrap_dim(d, dim(), "Tensor::size")];
}
int64_t Tensor::numel() const {
  return checked(impl_).numel;
}
int64_t Tensor::offset() const {
  return checked(impl_).offset;
}
DType Tensor::dtype() const {
  return checked(impl_).dtype;
}
Device Tensor::device() const {
  return checked(impl_).storage->device;
}
bool Tensor::is_contiguous() const {
  return checked(impl_).contiguous;
}
void* Tensor::data_ptr() const {
  return checked(impl_).byte_ptr();
}

template <class T>
T* Tensor::data() const {
  FREIGHT_CHECK(dtype() == dtype_of<T>(),
                fmt::format("Tensor::data<{}>() on a {} tensor", dtype_name(dtype_of<T>()),
                            dtype_name(dtype())));
  return static_cast<T*>(data_ptr());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int32_t* Tensor::data<int32_t>() const;
template int64_t* Tensor::data<int64_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;

// ---------------------------------------------------------------- copies
Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor src = contiguous();
  Tensor out = empty(shape(), dtype(), device);
  if (numel() > 0) {
    DeviceType via = device.is_cpu() ? this->device().type : device.type;
    backend_for(via).copy(out.data_ptr(), device, src.data_ptr(), this->device(), nbytes());
  }
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  Tensor out = empty(shape(), dtype, device());
  if (numel() > 0) kernels::copy(device().type, *this, out);
  return out;
}

void Tensor::copy_(const Tensor& src) {
  FREIGHT_CHECK(src.shape() == shape(),
                fmt::format("copy_: source shape {} differs from destination shape {}",
                            shape_str(src.shape()), shape_str(shape())));
  if (numel() == 0) return;
  Tensor s = src.device() == device() ? src : src.to(device());
  kernels::copy(device().type, s, *this);
}

void Tensor::fill_(double value) {
  if (numel() == 0) return;
  if (is_contiguous()) {
    kernels::fill(device().type, *this, value);
  } else {
    Tensor tmp = full(shape(), value, dtype(), device());
    kernels::copy(device().type, tmp, *this);
  }
}

Tensor Tensor::detach() const {
  const TensorImpl& me = checked(impl_);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = me.storage;
  impl->offset = me.offset;
  impl->shape = me.shape;
  impl->strides = me.strides;
  impl->numel = me.numel;
  impl->dtype = me.dtype;
  impl->contiguous = me.contiguous;
  return Tensor(std::move(impl));
}

// ---------------------------------------------------------------- host access
double Tensor::item() const {
  FREIGHT_CHECK(numel() == 1, fmt::format("item(): the tensor has shape {} ({} elements), not "
                                          "one element",
                                          shape_str(shape()), numel()));
  return to_double_vector()[0];
}

std::vector<double> Tensor::to_double_vector() const {
  Tensor host = detach().to(Device::cpu()).to(DType::F64).contiguous();
  const double* p = host.data<double>();
  return std::vector<double>(p, p + host.numel());
}

std::vector<float> Tensor::to_float_vector() const {
  Tensor host = detach().to(Device::cpu()).to(DType::F32).contiguous();
  const float* p = host.data<float>();
  return std::vector<float>(p, p + host.numel());
}

std::vector<int64_t> Tensor::to_int_vector() const {
  Tensor host = detach().to(Device::cpu()).to(DType::I64).contiguous();
  const int64_t* p = host.data<int64_t>();
  return std::vector<int64_t>(p, p + host.numel());
}

std::string Tensor::str(int max_elements) const {
  if (!defined()) return "Tensor(undefined)";
  std::string s =
      fmt::format("Tensor({}, {}, {}", shape_str(shape()), dtype_name(dtype()), device().str());
  if (numel() > 0) {
    std::vector<double> v = to_double_vector();
    s += ", [";
    for (int64_t i = 0; i < std::min<int64_t>(numel(), max_elements); ++i)
      s += fmt::format("{}{:.6g}", i ? ", " : "", v[i]);
    if (numel() > max_elements) s += ", ...";
    s += "]";
  }
  return s + ")";
}

// ---------------------------------------------------------------- autograd state
bool Tensor::requires_grad() const {
  const TensorImpl& me = checked(impl_);
  return me.requires_grad || me.grad_fn != nullptr;
}

Tensor& Tensor::set_requires_grad(bool on) {
  TensorImpl& me = const_cast<TensorImpl&>(checked(impl_));
  FREIGHT_CHECK(!me.grad_fn,
                "set_requires_grad: only leaf tensors (not results of ops) can be "
                "marked; use detach() first");
  FREIGHT_CHECK(
      !on || is_floating(me.dtype),
      fmt::format("set_requires_grad: a {} tensor cannot have gradients", dtype_name(me.dtype)));
  me.requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  return checked(impl_).grad;
}
void Tensor::set_grad(const Tensor& g) const {
  const_cast<TensorImpl&>(checked(impl_)).grad = g;
}
void Tensor::zero_grad() const {
  const_cast<TensorImpl&>(checked(impl_)).grad = Tensor();
}
bool Tensor::is_leaf() const {
  return checked(impl_).grad_fn == nullptr;
}
const std::shared_ptr<Node>& Tensor::grad_fn() const {
  return checked(impl_).grad_fn;
}

}  // namespace freight
