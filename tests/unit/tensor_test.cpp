#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "freight/freight.h"

namespace freight {
namespace {

TEST(Tensor, FactoriesShapesAndStrides) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dtype(), DType::F32);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u) << "CPU storage is 64-byte aligned";
  for (float v : t.to_float_vector()) EXPECT_EQ(v, 0.0f);
  Tensor f = Tensor::full({3}, 2.5, DType::F64);
  EXPECT_EQ(f.to_double_vector(), (std::vector<double>{2.5, 2.5, 2.5}));
}

TEST(Tensor, ViewsShareStorageAndCopyOnContiguous) {
  Tensor t = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor tt = t.t();
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_EQ(tt.to_float_vector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(tt.data_ptr(), t.data_ptr());
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.data_ptr(), t.data_ptr());
  EXPECT_EQ(t.slice(1, 1, 3).to_float_vector(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(t.select(0, 1).to_float_vector(), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(t.reshape({3, -1}).shape(), (Shape{3, 2}));
}

TEST(Tensor, DtypeConversionRoundTrips) {
  Tensor t = Tensor::from_vector(std::vector<double>{1.5, -2.25, 3}, {3});
  EXPECT_EQ(t.to(DType::F32).to_float_vector(), (std::vector<float>{1.5f, -2.25f, 3.0f}));
  EXPECT_EQ(t.to(DType::I64).to_int_vector(), (std::vector<int64_t>{1, -2, 3}));
}

TEST(Tensor, SeededRandomIsReproducible) {
  Generator a(42), b(42), c(43);
  Tensor x = Tensor::normal({100}, 0, 1, DType::F32, Device::cpu(), &a);
  Tensor y = Tensor::normal({100}, 0, 1, DType::F32, Device::cpu(), &b);
  Tensor z = Tensor::normal({100}, 0, 1, DType::F32, Device::cpu(), &c);
  EXPECT_EQ(x.to_float_vector(), y.to_float_vector());
  EXPECT_NE(x.to_float_vector(), z.to_float_vector());
  // Moments of a large normal sample.
  Generator g(1);
  std::vector<double> v = Tensor::normal({20000}, 1.0, 2.0, DType::F64, Device::cpu(), &g)
                              .to_double_vector();
  double m = 0, s = 0;
  for (double e : v) m += e;
  m /= double(v.size());
  for (double e : v) s += (e - m) * (e - m);
  s = std::sqrt(s / double(v.size()));
  EXPECT_NEAR(m, 1.0, 0.05);
  EXPECT_NEAR(s, 2.0, 0.05);
  std::vector<int64_t> r = Tensor::randint({1000}, 3, 7, Device::cpu(), &g).to_int_vector();
  for (int64_t e : r) {
    EXPECT_GE(e, 3);
    EXPECT_LT(e, 7);
  }
}

TEST(Tensor, ErrorsNameTheOpAndShapes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  try {
    (void)add(a, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  }
  try {
    (void)matmul(a, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("matmul"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  }
  try {
    (void)add(a, Tensor::zeros({2, 3}, DType::F64));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)a.reshape({7}), Error);
  EXPECT_THROW((void)Tensor().shape(), Error);
}

TEST(Tensor, CudaWithoutGpuIsAnErrorWithAReason) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present";
  try {
    (void)resolve_device("cuda");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable GPU"), std::string::npos) << e.what();
  }
  std::string note;
  EXPECT_EQ(resolve_device("auto", &note), Device::cpu());
  EXPECT_NE(note.find("cpu"), std::string::npos);
  EXPECT_THROW((void)parse_device("tpu"), Error);
}

TEST(Tensor, PoisonedAllocationsAreNaN) {
  set_poison_allocations(true);
  Tensor t = Tensor::empty({4});
  set_poison_allocations(false);
  for (float v : t.to_float_vector()) EXPECT_TRUE(std::isnan(v));
}

TEST(Runtime, CachingAllocatorReusesBlocks) {
  MemoryStats before = memory_stats(Device::cpu());
  for (int i = 0; i < 10; ++i) Tensor t = Tensor::empty({1 << 20});
  MemoryStats after = memory_stats(Device::cpu());
  EXPECT_EQ(after.allocs - before.allocs, 10u);
  EXPECT_LE(after.fresh - before.fresh, 1u) << "a freed block should be reused";
}

}  // namespace
}  // namespace freight
