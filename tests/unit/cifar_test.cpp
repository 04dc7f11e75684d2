// CIFAR-10/100 binary batches written here: records read back exactly in both directory
// layouts, the fine label of CIFAR-100, and every malformed batch or directory named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/array_files.h"
#include "common/test_util.h"
#include "freight/data/cifar.h"
#include "freight/training.h"

namespace freight::data {
namespace {

namespace fs = std::filesystem;
using test::cifar_records;
using test::has;

class CifarFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_cifar_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A CIFAR-10 folder: batch b of the train split holds labels {b, b+1}; the test split 3 records.
  fs::path cifar10(const fs::path& where) {
    for (int b = 1; b <= 5; ++b)
      test::write_file(where / ("data_batch_" + std::to_string(b) + ".bin"),
                       cifar_records({b, b + 1}, 10, 2 * (b - 1)));
    test::write_file(where / "test_batch.bin", cifar_records({9, 0, 4}, 10));
    return where;
  }
  std::string error_loading(const fs::path& dir, int classes = 10,
                            const std::string& split = "train") {
    return test::error_of([&] { load_cifar(dir.string(), classes, split); });
  }
  fs::path dir_;
};

// Pixel p of record r was written as (r * 31 + p * 7) mod 256 (tests/common/array_files.h).
void expect_pixels(const Dataset& d) {
  ASSERT_EQ(d.inputs.dtype(), DType::U8);
  const uint8_t* px = d.inputs.data<uint8_t>();
  for (int64_t r = 0; r < d.size(); ++r)
    for (int64_t p : {0, 1, 1023, 1024, 2047, 2048, 3071}) {
      // Channel-major: p = c * 1024 + row * 32 + col lands at inputs[r][c][row][col].
      ASSERT_EQ(px[r * 3072 + p], uint8_t((r * 31 + p * 7) % 256)) << "record " << r << " " << p;
    }
}

TEST_F(CifarFiles, Cifar10ReadsBackInBothLayouts) {
  for (bool nested : {false, true}) {
    SCOPED_TRACE(nested ? "DIR/cifar-10-batches-bin" : "DIR");
    fs::path root = dir_ / (nested ? "parent" : "flat");
    cifar10(nested ? root / "cifar-10-batches-bin" : root);
    Dataset train = load_cifar(root.string(), 10, "train");
    EXPECT_EQ(train.name, "cifar10/train");
    EXPECT_EQ(train.num_classes, 10);
    EXPECT_EQ(train.inputs.shape(), (Shape{10, 3, 32, 32}));
    ASSERT_EQ(train.labels.shape(), (Shape{10}));
    std::vector<int64_t> want{1, 2, 2, 3, 3, 4, 4, 5, 5, 6};
    for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(train.labels.data<int64_t>()[i], want[size_t(i)]);
    expect_pixels(train);
    Dataset test = load_cifar(root.string(), 10, "test");
    EXPECT_EQ(test.size(), 3);
    EXPECT_EQ(test.labels.data<int64_t>()[0], 9);
    expect_pixels(test);
  }
}

TEST_F(CifarFiles, Cifar100UsesTheFineLabel) {
  fs::path root = dir_ / "c100";
  test::write_file(root / "cifar-100-binary" / "train.bin", cifar_records({99, 0, 57}, 100));
  test::write_file(root / "cifar-100-binary" / "test.bin", cifar_records({12}, 100));
  Dataset train = load_cifar(root.string(), 100, "train");
  EXPECT_EQ(train.num_classes, 100);
  EXPECT_EQ(train.labels.data<int64_t>()[0], 99);
  EXPECT_EQ(train.labels.data<int64_t>()[2], 57);
  expect_pixels(train);
  Dataset via_data = load_cifar_data("cifar100:" + root.string(), "test");
  EXPECT_EQ(via_data.labels.data<int64_t>()[0], 12);
}

TEST_F(CifarFiles, SizeNotAMultipleOfTheRecord) {
  std::string p = test::write_file(dir_ / "b.bin", cifar_records({1, 2}, 10) + "abcde");
  std::string m = test::error_of([&] { read_cifar_batch(p, 10); });
  EXPECT_TRUE(has(m, "CIFAR-10 batch '" + p + "' is truncated") &&
              has(m, "6151 bytes are not a multiple of the 3073-byte record") &&
              has(m, "2 whole records, then 5 bytes of a truncated one"))
      << m;
  std::string ten = test::write_file(dir_ / "ten.bin", cifar_records({1, 2}, 10));
  m = test::error_of([&] { read_cifar_batch(ten, 100); });
  EXPECT_TRUE(has(m, "CIFAR-100 batch") && has(m, "not a multiple of the 3074-byte record")) << m;
  std::string empty = test::write_file(dir_ / "empty.bin", "");
  EXPECT_TRUE(has(test::error_of([&] { read_cifar_batch(empty, 10); }), "is empty"));
}

TEST_F(CifarFiles, LabelsOutOfRangeNameTheRecord) {
  std::string p = test::write_file(dir_ / "b.bin", cifar_records({1, 10}, 10));
  std::string m = test::error_of([&] { read_cifar_batch(p, 10); });
  EXPECT_TRUE(has(m, p) && has(m, "record 1 (at byte 3073) has label 10, out of range for 10"))
      << m;
  std::string fine = test::write_file(dir_ / "f.bin", cifar_records({100}, 100));
  m = test::error_of([&] { read_cifar_batch(fine, 100); });
  EXPECT_TRUE(has(m, "record 0 (at byte 0) has coarse label 20, out of range for 20")) << m;
  std::string coarse = cifar_records({5}, 100);
  coarse[0] = 20;
  p = test::write_file(dir_ / "c.bin", coarse);
  EXPECT_TRUE(has(test::error_of([&] { read_cifar_batch(p, 100); }), "coarse label 20"));
  coarse[0] = 1, coarse[1] = char(100);
  p = test::write_file(dir_ / "c.bin", coarse);
  m = test::error_of([&] { read_cifar_batch(p, 100); });
  EXPECT_TRUE(has(m, "has label 100, out of range for 100 classes")) << m;
}

TEST_F(CifarFiles, MissingFilesAreListed) {
  fs::path root = cifar10(dir_ / "partial");
  fs::remove(root / "data_batch_3.bin");
  fs::remove(root / "data_batch_5.bin");
  std::string m = error_loading(root);
  EXPECT_TRUE(has(m, "CIFAR-10 directory '" + root.string() +
                         "' lacks data_batch_3.bin, "
                         "data_batch_5.bin of the train split's files data_batch_1.bin, "
                         "data_batch_2.bin"))
      << m;
  EXPECT_TRUE(error_loading(root, 10, "test").empty());
  fs::create_directories(dir_ / "empty");
  m = error_loading(dir_ / "empty", 100, "test");
  EXPECT_TRUE(has(m, "holds none of the test split's files: test.bin")) << m;
  // CIFAR-10 files read as CIFAR-100.
  m = error_loading(root, 100, "train");
  EXPECT_TRUE(has(m, "this looks like CIFAR-10: --data cifar10:" + root.string())) << m;
  m = error_loading(dir_ / "nowhere");
  EXPECT_TRUE(has(m, (dir_ / "nowhere").string()) && has(m, "does not exist")) << m;
  // The Python version (pickles) is recognised and refused.
  test::write_file(dir_ / "py" / "cifar-10-batches-py" / "data_batch_1", "pickle");
  m = error_loading(dir_ / "py");
  EXPECT_TRUE(has(m, "looks like the Python version (cifar-10-batches-py)")) << m;
  m = test::error_of([&] { load_cifar_data("cifar10", "train"); });
  EXPECT_TRUE(has(m,
                  "--data cifar10 needs the directory that holds the batches: --data "
                  "cifar10:DIR"))
      << m;
}

TEST_F(CifarFiles, DataNamesAndNormalisation) {
  EXPECT_TRUE(is_cifar_data("cifar10:/x"));
  EXPECT_TRUE(is_cifar_data("cifar100:x"));
  EXPECT_TRUE(is_cifar_data("cifar10"));
  EXPECT_FALSE(is_cifar_data("cifar1000:x"));
  EXPECT_FALSE(is_cifar_data("data/cifar10"));
  auto [m10, s10] = dataset_normalisation("cifar10:/somewhere");
  auto [m100, s100] = dataset_normalisation("cifar100:/somewhere");
  EXPECT_NEAR(m10, 0.4734, 1e-4);
  EXPECT_NEAR(s10, 0.2516, 1e-4);
  EXPECT_NEAR(m100, 0.4782, 1e-4);
  EXPECT_NEAR(s100, 0.2682, 1e-4);
}

}  // namespace
}  // namespace freight::data
