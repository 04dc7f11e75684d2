// The `freight` command on a user's own data: CIFAR-10/100 binary batches (--data cifar10:DIR)
// and NumPy arrays (--data my.npz, x.npy,y.npy), written by the tests. The zoo's CIFAR models
// train on a CIFAR folder, the MLP on an archive, and broken files end in "freight: error:"
// naming the file, exit 1, within a bounded address space. When Debian's python3 has NumPy,
// archives written by np.savez and np.savez_compressed read back byte for byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/array_files.h"
#include "common/test_util.h"
#include "freight/data/npy.h"
#include "freight/data/npz.h"

namespace {

namespace fs = std::filesystem;
using freight::test::has;
using freight::test::ShellRun;

// As in hostile_files_test.cpp: ample for these runs, far below what a lying header asks for.
constexpr const char* kUlimit = "ulimit -v 3000000; ";

class DataFormats : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_formats_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  static ShellRun freight(const std::string& args) {
    return freight::test::shell(std::string(kUlimit) + FREIGHT_CLI_PATH + " " + args);
  }
  // A CIFAR-10 tarball's folder under `root`: 5 train batches of 16 records, a test batch of 12.
  std::string cifar10(const std::string& root) {
    fs::path d = dir_ / root / "cifar-10-batches-bin";
    for (int b = 1; b <= 5; ++b) {
      std::vector<int> labels;
      for (int i = 0; i < 16; ++i) labels.push_back((b * 16 + i) % 10);
      freight::test::write_file(d / ("data_batch_" + std::to_string(b) + ".bin"),
                                freight::test::cifar_records(labels, 10, b * 16));
    }
    freight::test::write_file(d / "test_batch.bin", freight::test::cifar_records(
                                                        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1}, 10));
    return (dir_ / root).string();
  }
  // x uint8 [n, 28, 28] (sample s: a band of bright rows whose place is its label), y int64 [n].
  std::string mnist_like_npz(const std::string& name, int64_t n, bool deflate, bool test_split) {
    std::vector<uint8_t> x(size_t(n) * 784);
    std::vector<int64_t> y(static_cast<size_t>(n));
    for (int64_t s = 0; s < n; ++s) {
      y[size_t(s)] = s % 10;
      for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 28; ++c) x[size_t(s * 784 + (2 * (s % 10) + r + 4) * 28 + c)] = 255;
    }
    std::vector<freight::test::ZipEntry> e{
        {"x.npy", freight::test::npy_of("|u1", {n, 28, 28}, x), deflate},
        {"y.npy", freight::test::npy_of("<i8", {n}, y), deflate}};
    if (test_split) {
      e.push_back({"x_test.npy", freight::test::npy_of("|u1", {n, 28, 28}, x), deflate});
      e.push_back({"y_test.npy", freight::test::npy_of("<i8", {n}, y), deflate});
    }
    return freight::test::write_file(dir_ / name, freight::test::zip_file(e));
  }
  void expect_failure(const std::string& args, const std::vector<std::string>& fragments) {
    freight::test::expect_refusal(freight(args), args, fragments);
  }
  fs::path dir_;
};

TEST_F(DataFormats, CifarModelsTrainOnACifar10Folder) {
  std::string root = cifar10("tarball");
  ShellRun r = freight("train --model alexnet-cifar --data cifar10:" + root +
                       " --epochs 1 --limit-train 64 --batch-size 32 --no-save --device cpu");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "data cifar10:" + root + ": 64 train / 12 test samples")) << r.output;
  EXPECT_TRUE(has(r.output, "test accuracy")) << r.output;
  r = freight("train --model resnet56-cifar --data cifar10:" + root + "/cifar-10-batches-bin" +
              " --epochs 1 --limit-train 16 --limit-test 8 --batch-size 16 --no-save --device cpu");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "16 train / 8 test samples")) << r.output;
}

TEST_F(DataFormats, MlpTrainsOnAnNpzAndEvalSaysWhatTheTestSplitIs) {
  for (bool deflate : {false, true}) {
    SCOPED_TRACE(deflate ? "savez_compressed layout" : "savez layout");
    std::string npz = mnist_like_npz("my.npz", 200, deflate, false);
    std::string ckpt = path("mlp.safetensors");
    ShellRun r =
        freight("train --model mlp --data " + npz + " --epochs 3 --save " + ckpt + " --device cpu");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(has(r.output, "data " + npz + ": 200 train / 200 test samples")) << r.output;
    EXPECT_TRUE(has(r.output, "the test split is the training arrays")) << r.output;
    EXPECT_TRUE(has(r.output, "test accuracy 100.00%")) << r.output;  // ten distinct images
    r = freight("eval " + ckpt + " --data " + npz + " --device cpu");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(has(r.output, "the test split is the training arrays")) << r.output;
    EXPECT_TRUE(has(r.output, "200 samples")) << r.output;
  }
  std::string both = mnist_like_npz("both.npz", 50, true, true);
  ShellRun r = freight("train --model mlp --data " + both + " --epochs 1 --no-save --device cpu");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(has(r.output, "the test split is the training arrays")) << r.output;
}

TEST_F(DataFormats, BrokenFilesEndInAClearError) {
  std::string root = cifar10("c");
  fs::path batch = fs::path(root) / "cifar-10-batches-bin" / "data_batch_2.bin";
  fs::resize_file(batch, 16 * 3073 - 100);
  expect_failure("train --model alexnet-cifar --no-save --device cpu --data cifar10:" + root,
                 {batch.string(), "truncated", "15 whole records, then 2973 bytes"});
  std::string other = cifar10("d");
  fs::remove(fs::path(other) / "cifar-10-batches-bin" / "data_batch_4.bin");
  expect_failure("train --model alexnet-cifar --no-save --device cpu --data cifar10:" + other,
                 {"lacks data_batch_4.bin"});
  expect_failure("train --model mlp --no-save --device cpu --data cifar10:" + cifar10("e"),
                 {"samples of shape [3, 32, 32] do not fit model 'mlp' (input [1, 28, 28])"});
  fs::path c100 = dir_ / "c100" / "cifar-100-binary";
  freight::test::write_file(c100 / "train.bin", freight::test::cifar_records({42}, 100));
  freight::test::write_file(c100 / "test.bin", freight::test::cifar_records({7}, 100));
  expect_failure("train --model alexnet-cifar --no-save --device cpu --data cifar100:" +
                     (dir_ / "c100").string(),
                 {"100 classes but model 'alexnet-cifar' predicts 10"});
  // An archive whose data was damaged, and an array whose header claims a terabyte.
  std::string npz = mnist_like_npz("bad.npz", 20, false, false);
  {
    std::fstream f(npz, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  }
  expect_failure("train --model mlp --no-save --device cpu --data " + npz,
                 {npz, "entry 'x.npy' is corrupt: its CRC-32"});
  std::string huge = freight::test::write_file(
      dir_ / "huge.npy",
      freight::test::npy_file(freight::test::npy_dict("<f4", {1 << 20, 1 << 20}), "tiny"));
  std::string y = freight::test::write_file(
      dir_ / "y.npy", freight::test::npy_of("<i8", {1}, std::vector<int64_t>{0}));
  expect_failure("train --model mlp --no-save --device cpu --data " + huge + "," + y,
                 {huge, "is truncated", "[1048576, 1048576]"});
  expect_failure("train --model mlp --no-save --device cpu --data " + path("absent.npz"),
                 {"cannot open NumPy archive", "absent.npz"});
  // A file in no format Freight reads: the formats it reads, not MNIST's file names.
  std::string csv = freight::test::write_file(dir_ / "table.csv", std::string("1,2,3\n4,5,6\n"));
  expect_failure("train --model mlp --no-save --device cpu --data " + csv,
                 {csv, "a file Freight does not read", "x.npy,y.npy", "np.save"});
}

// Archives written by NumPy itself (np.savez, np.savez_compressed; .npy versions 2.0 and 3.0
// through np.lib.format) read back byte for byte, and train through the command.
TEST_F(DataFormats, NumpyWrittenFilesReadIdentically) {
  if (freight::test::shell("/usr/bin/python3 -c 'import numpy'").status != 0)
    GTEST_SKIP() << "Debian's python3 has no NumPy (apt install python3-numpy)";
  const std::string script = path("write.py");
  std::ofstream(script) << R"(import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(7)
arrays = {
    'u8': (np.arange(24, dtype=np.uint8) * 7).reshape(2, 3, 4),
    'i32': np.array([-5, 2**31 - 1, -2**31, 0], np.int32),
    'i64': (np.arange(6, dtype=np.int64) - 3) * 10**12,
    'f32': np.linspace(-1, 1, 10, dtype=np.float32).reshape(5, 2),
    'f64': np.array([np.pi, -0.0, 1e-310, 1e300]),
    'scalar': np.float64(2.5),
    'noise': rng.integers(0, 256, 300000, dtype=np.uint8),
    'zeros': np.zeros((1000, 1000), np.float32),
}
np.savez(d + '/stored.npz', **arrays)
np.savez_compressed(d + '/deflated.npz', **arrays)
for name, a in arrays.items():
    a = np.asarray(a)
    open(d + '/' + name + '.bin', 'wb').write(a.tobytes())
    open(d + '/' + name + '.shape', 'w').write(' '.join(map(str, a.shape)))
x = np.zeros((100, 28, 28), np.uint8)
y = np.arange(100) % 10
for s in range(100):
    x[s, 2 * y[s] + 4: 2 * y[s] + 6] = 255
np.savez_compressed(d + '/mnist_like.npz', x=x, y=y)
for v in [(2, 0), (3, 0)]:
    with open(d + '/v%d.npy' % v[0], 'wb') as f:
        np.lib.format.write_array(f, arrays['f32'], version=v)
)";
  ShellRun w = freight::test::shell("/usr/bin/python3 " + script + " " + dir_.string());
  ASSERT_EQ(w.status, 0) << w.output;
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  for (const char* archive : {"stored.npz", "deflated.npz"}) {
    SCOPED_TRACE(archive);
    freight::data::NpzFile f(path(archive));
    EXPECT_EQ(f.names().size(), 8u);
    for (const std::string& name : f.names()) {
      SCOPED_TRACE(name);
      freight::Tensor t = f.read(name);
      std::string want = slurp(path(name + ".bin"));
      ASSERT_EQ(size_t(t.numel()) * freight::dtype_size(t.dtype()), want.size());
      EXPECT_EQ(std::memcmp(t.data_ptr(), want.data(), want.size()), 0);
      std::string shape;
      for (int64_t d : t.shape()) {
        if (!shape.empty()) shape += ' ';
        shape += std::to_string(d);
      }
      EXPECT_EQ(shape, slurp(path(name + ".shape")));
    }
  }
  for (const char* v : {"v2.npy", "v3.npy"}) {
    freight::Tensor t = freight::data::read_npy(path(v));
    EXPECT_EQ(t.shape(), (freight::Shape{5, 2}));
    EXPECT_EQ(std::memcmp(t.data_ptr(), slurp(path("f32.bin")).data(), 40), 0);
  }
  ShellRun r = freight("train --model mlp --data " + path("mnist_like.npz") +
                       " --epochs 1 --no-save --device cpu");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "100 train / 100 test samples")) << r.output;
}

}  // namespace
