// NumPy arrays as a dataset through load_dataset, the path `--data my.npz` takes: dtypes
// converted exactly, samples reshaped to the model's input, the test split rule, and the
// messages for arrays that do not fit the model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "common/array_files.h"
#include "common/test_util.h"
#include "freight/data/arrays.h"
#include "freight/nn/model_file.h"
#include "freight/training.h"

namespace freight {
namespace {

namespace fs = std::filesystem;
using test::has;
using test::npy_of;
using test::ZipEntry;

class ArraysData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_arrays_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    mlp_ = nn::load_model_spec("mlp");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string npz(const std::vector<ZipEntry>& entries, const std::string& name = "a.npz") {
    return test::write_file(dir_ / name, test::zip_file(entries));
  }
  std::string write(const std::string& name, const std::string& bytes) {
    return test::write_file(dir_ / name, bytes);
  }
  // n MNIST-sized images: pixel i of sample s is (s + i) mod 256.
  static std::vector<uint8_t> pixels(int64_t n) {
    std::vector<uint8_t> v(size_t(n * 784));
    for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t((i / 784 + i % 784) % 256);
    return v;
  }
  std::string error_loading(const std::string& data, const nn::ModelSpec& spec,
                            const std::string& split = "train") {
    return test::error_of([&] { load_dataset(data, split, spec); });
  }
  // The dataset's notes as one string ("" when it has none).
  static std::string notes(const data::Dataset& d) {
    std::string all;
    for (const std::string& n : d.notes) all += n + "\n";
    return all;
  }
  fs::path dir_;
  nn::ModelSpec mlp_;
};

TEST_F(ArraysData, ASplitOtherThanTrainOrTestIsRefusedNamingIt) {
  std::string p = npz({{"x.npy", npy_of("|u1", {5, 28, 28}, pixels(5))},
                       {"y.npy", npy_of("<i8", {5}, std::vector<int64_t>{0, 9, 3, 3, 1})}});
  for (const std::string& data : {p, std::string("synthetic")}) {
    const std::string e = error_loading(data, mlp_, "valid");
    EXPECT_NE(e.find("split 'valid' is neither 'train' nor 'test'"), std::string::npos) << e;
    EXPECT_NE(e.find(data), std::string::npos) << e;
  }
}

TEST_F(ArraysData, Uint8ImagesReshapedToTheModelsInput) {
  std::string p = npz({{"x.npy", npy_of("|u1", {5, 28, 28}, pixels(5))},
                       {"y.npy", npy_of("<i8", {5}, std::vector<int64_t>{0, 9, 3, 3, 1})}});
  data::Dataset d = load_dataset(p, "train", mlp_);
  EXPECT_EQ(d.inputs.dtype(), DType::U8);
  EXPECT_EQ(d.inputs.shape(), (Shape{5, 1, 28, 28}));
  EXPECT_EQ(d.labels.dtype(), DType::I64);
  EXPECT_EQ(d.labels.data<int64_t>()[1], 9);
  EXPECT_EQ(d.num_classes, 10);
  std::vector<uint8_t> want = pixels(5);
  EXPECT_EQ(std::memcmp(d.inputs.data<uint8_t>(), want.data(), want.size()), 0);
  auto [mean, std] = dataset_normalisation(p);  // uint8 pixels become x / 255, like ToTensor
  EXPECT_EQ(mean, 0.0);
  EXPECT_EQ(std, 1.0);
}

TEST_F(ArraysData, FloatsAndIntegerLabelsConvertExactly) {
  std::vector<double> f64(2 * 784);
  for (size_t i = 0; i < f64.size(); ++i) f64[i] = double(i) / 64.0 - 3.0;  // exact in float
  std::vector<float> f32(f64.begin(), f64.end());
  for (bool deflate : {false, true}) {
    std::string p = npz({{"x.npy", npy_of("<f8", {2, 784}, f64), deflate},
                         {"y.npy", npy_of("<i4", {2}, std::vector<int32_t>{7, 2}), deflate},
                         {"x_test.npy", npy_of("<f4", {2, 1, 28, 28}, f32), deflate},
                         {"y_test.npy", npy_of("|u1", {2}, std::vector<uint8_t>{4, 5}), deflate}});
    data::Dataset train = load_dataset(p, "train", mlp_);
    data::Dataset test = load_dataset(p, "test", mlp_);
    for (const data::Dataset* d : {&train, &test}) {
      EXPECT_EQ(d->inputs.dtype(), DType::F32);
      EXPECT_EQ(d->inputs.shape(), (Shape{2, 1, 28, 28}));
      EXPECT_EQ(std::memcmp(d->inputs.data<float>(), f32.data(), f32.size() * 4), 0);
      EXPECT_TRUE(d->notes.empty()) << notes(*d);
    }
    EXPECT_EQ(train.labels.data<int64_t>()[0], 7);
    EXPECT_EQ(test.labels.data<int64_t>()[1], 5);
    EXPECT_EQ(test.name, p + "/test");
  }
}

TEST_F(ArraysData, WithoutTestArraysTheTestSplitIsTheTrainingSetWithANote) {
  std::string p = npz({{"x.npy", npy_of("|u1", {3, 784}, pixels(3))},
                       {"y.npy", npy_of("<i8", {3}, std::vector<int64_t>{1, 2, 3})}});
  data::Dataset test = load_dataset(p, "test", mlp_);
  EXPECT_EQ(test.size(), 3);
  EXPECT_EQ(test.labels.data<int64_t>()[2], 3);
  EXPECT_TRUE(has(notes(test),
                  "has no arrays x_test and y_test: the test split is the training "
                  "arrays"))
      << notes(test);
  EXPECT_TRUE(load_dataset(p, "train", mlp_).notes.empty());
  std::string half = npz({{"x.npy", npy_of("|u1", {3, 784}, pixels(3))},
                          {"y.npy", npy_of("<i8", {3}, std::vector<int64_t>{1, 2, 3})},
                          {"x_test.npy", npy_of("|u1", {3, 784}, pixels(3))}},
                         "half.npz");
  std::string m = error_loading(half, mlp_, "test");
  EXPECT_TRUE(has(m, "has x_test but no y_test")) << m;
}

TEST_F(ArraysData, PairsOfNpyFiles) {
  std::string x = write("x.npy", npy_of("|u1", {2, 784}, pixels(2)));
  std::string y = write("y.npy", npy_of("<i8", {2}, std::vector<int64_t>{4, 6}));
  std::string xt = write("xt.npy", npy_of("|u1", {1, 784}, pixels(1)));
  std::string yt = write("yt.npy", npy_of("<i8", {1}, std::vector<int64_t>{8}));
  EXPECT_TRUE(data::is_arrays_data(x + "," + y));
  EXPECT_FALSE(data::is_arrays_data(dir_.string()));
  data::Dataset two = load_dataset(x + "," + y, "test", mlp_);
  EXPECT_EQ(two.size(), 2);
  EXPECT_TRUE(has(notes(two), "has no test files")) << notes(two);
  data::Dataset four = load_dataset(x + "," + y + "," + xt + "," + yt, "test", mlp_);
  EXPECT_EQ(four.size(), 1);
  EXPECT_EQ(four.labels.data<int64_t>()[0], 8);
  EXPECT_TRUE(four.notes.empty());
  std::string m = error_loading(x, mlp_);
  EXPECT_TRUE(has(m, "give the inputs and labels as two .npy files")) << m;
  m = error_loading(x + "," + y + "," + xt, mlp_);
  EXPECT_TRUE(has(m, "give the inputs and labels as two .npy files")) << m;
}

TEST_F(ArraysData, ShapeCountDtypeAndLabelErrors) {
  auto y = [](std::vector<int64_t> v) {
    return ZipEntry{"y.npy", npy_of("<i8", {int64_t(v.size())}, v)};
  };
  struct Case {
    std::vector<ZipEntry> entries;
    std::vector<std::string> fragments;
  };
  std::vector<float> f(3 * 10, 0.5f);
  const Case cases[] = {
      {{{"x.npy", npy_of("<f4", {3, 10}, f)}, y({0, 1, 2})},
       {"entry 'x.npy': samples of shape [10] do not fit model 'mlp' (input [1, 28, 28])"}},
      {{{"x.npy", npy_of("|u1", {3, 784}, pixels(3))}, y({0, 1})},
       {"x and y hold different numbers of samples",
        "entry 'x.npy' has shape [3, 784] (3 "
        "samples)",
        "entry 'y.npy' has shape [2] (2 labels)"}},
      {{{"x.npy", npy_of("|u1", {3, 784}, pixels(3))}, y({0, 10, 2})},
       {"entry 'y.npy': label 10 at index 1 is out of range for model 'mlp' with 10 classes"}},
      {{{"x.npy", npy_of("|u1", {3, 784}, pixels(3))}, y({0, 1, -1})},
       {"entry 'y.npy': label -1 at index 2 is out of range"}},
      {{{"x.npy", npy_of("|u1", {3, 784}, pixels(3))},
        {"y.npy", npy_of("<f4", {3}, std::vector<float>{0, 1, 2})}},
       {"entry 'y.npy' holds float32 values; y must hold integer class labels"}},
      {{{"x.npy", npy_of("|u1", {3, 784}, pixels(3))},
        {"y.npy", npy_of("<i8", {3, 1}, std::vector<int64_t>{0, 1, 2})}},
       {"entry 'y.npy' has shape [3, 1]; y must hold one class label per sample, shape [3]"}},
      {{{"x.npy", npy_of("<i8", {1, 784}, std::vector<int64_t>(784, 1))}, y({0})},
       {"entry 'x.npy' holds int64 values", "model 'mlp' takes float32 inputs"}},
      {{{"x.npy", npy_of("|u1", {0, 784}, std::vector<uint8_t>{})}, y({})},
       {"entry 'x.npy' holds no samples (shape [0, 784])"}},
      {{{"x.npy", npy_of("<f4", {}, std::vector<float>{1})}, y({0})},
       {"entry 'x.npy' holds no samples (shape [])"}},
      {{{"y.npy", npy_of("<i8", {1}, std::vector<int64_t>{0})}}, {"has no array 'x'"}},
      {{{"arr_0.npy", npy_of("<i8", {1}, std::vector<int64_t>{0})}},
       {"has no array 'x' (it holds arr_0)", "np.savez names arrays given without a name"}},
  };
  for (const Case& c : cases) {
    std::string p = npz(c.entries);
    std::string m = error_loading(p, mlp_);
    SCOPED_TRACE(m);
    EXPECT_TRUE(has(m, "NumPy archive '" + p + "'"));
    for (const std::string& frag : c.fragments) EXPECT_TRUE(has(m, frag)) << frag;
  }
  std::vector<float> nan(784, 0.0f);
  nan[5] = std::nanf("");
  std::string p = npz({{"x.npy", npy_of("<f4", {1, 784}, nan)}, y({0})});
  EXPECT_TRUE(has(error_loading(p, mlp_), "sample 0 holds nan; inputs must be finite"));
  std::vector<double> big(784, 1e300);
  p = npz({{"x.npy", npy_of("<f8", {1, 784}, big)}, y({0})});
  EXPECT_TRUE(has(error_loading(p, mlp_), "within float32's range"));
}

TEST_F(ArraysData, TokenIdsForALanguageModel) {
  nn::ModelSpec lm = nn::load_model_spec("lstm-ptb");  // input [32] int64, vocab 10000
  std::vector<int32_t> ids(2 * 32), next(2 * 32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i * 97 % 10000), next[i] = int32_t(i);
  std::string p =
      npz({{"x.npy", npy_of("<i4", {2, 32}, ids)}, {"y.npy", npy_of("<i4", {2, 32}, next)}});
  data::Dataset d = load_dataset(p, "train", lm);
  EXPECT_EQ(d.inputs.dtype(), DType::I64);
  EXPECT_EQ(d.labels.shape(), (Shape{2, 32}));
  EXPECT_EQ(d.inputs.data<int64_t>()[40], 40 * 97 % 10000);
  EXPECT_EQ(d.labels.data<int64_t>()[63], 63);
  ids[33] = 10000;
  p = npz({{"x.npy", npy_of("<i4", {2, 32}, ids)}, {"y.npy", npy_of("<i4", {2, 32}, next)}});
  std::string m = error_loading(p, lm);
  EXPECT_TRUE(has(m,
                  "token id 10000 (sample 1) is out of range for model 'lstm-ptb', whose "
                  "vocabulary has 10000 tokens"))
      << m;
  p = npz({{"x.npy", npy_of("<i4", {2, 32}, next)},
           {"y.npy", npy_of("<i8", {2}, std::vector<int64_t>{0, 1})}});
  m = error_loading(p, lm);
  EXPECT_TRUE(has(m, "predicts a class per token, so y must have x's shape [2, 32]")) << m;
  p = npz({{"x.npy", npy_of("<f4", {2, 32}, std::vector<float>(64))},
           {"y.npy", npy_of("<i4", {2, 32}, next)}});
  m = error_loading(p, lm);
  EXPECT_TRUE(has(m, "holds float32 values, but model 'lstm-ptb' takes int64 token ids")) << m;
}

}  // namespace
}  // namespace freight
