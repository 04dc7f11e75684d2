// The IDX reader against good and broken files: every failure is a freight::Error naming the
// file, never a crash.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "freight/data/dataset.h"
#include "freight/freight.h"

namespace freight::data {
namespace {

namespace fs = std::filesystem;

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_idx_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<uint8_t> header(uint8_t type, const std::vector<uint32_t>& dims) {
    std::vector<uint8_t> h{0, 0, type, uint8_t(dims.size())};
    for (uint32_t d : dims)
      for (int s = 24; s >= 0; s -= 8) h.push_back(uint8_t(d >> s));
    return h;
  }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes, bool gz = false) {
    std::string p = (dir_ / name).string();
    if (gz) {
      gzFile f = gzopen(p.c_str(), "wb");
      gzwrite(f, bytes.data(), unsigned(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(p, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    }
    return p;
  }
  std::string images(uint32_t n, bool gz = false) {
    std::vector<uint8_t> b = header(0x08, {n, 2, 3});
    for (uint32_t i = 0; i < n * 6; ++i) b.push_back(uint8_t(i * 7));
    return write(gz ? "img.gz" : "img", b, gz);
  }
  std::string labels(const std::vector<uint8_t>& l) {
    std::vector<uint8_t> b = header(0x08, {uint32_t(l.size())});
    b.insert(b.end(), l.begin(), l.end());
    return write("lab", b);
  }
  // Expects an Error whose message names `file` and contains `fragment`.
  static void expect_error(const std::function<void()>& f, const std::string& file,
                           const std::string& fragment) {
    try {
      f();
      FAIL() << "expected an error mentioning " << fragment;
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(file), std::string::npos) << m;
      EXPECT_NE(m.find(fragment), std::string::npos) << m;
    }
  }
  fs::path dir_;
};

TEST_F(IdxFiles, ReadsPlainAndGzip) {
  for (bool gz : {false, true}) {
    IdxArray a = read_idx(images(4, gz));
    EXPECT_EQ(a.dims, (Shape{4, 2, 3}));
    ASSERT_EQ(a.data.size(), 24u);
    EXPECT_EQ(a.data[5], uint8_t(35));
  }
  Dataset d = load_idx(images(3), labels({1, 9, 0}), 10, "tiny");
  EXPECT_EQ(d.size(), 3);
  EXPECT_EQ(d.sample_shape(), (Shape{2, 3}));
  EXPECT_EQ(d.labels.to_int_vector(), (std::vector<int64_t>{1, 9, 0}));
  EXPECT_EQ(d.inputs.dtype(), DType::U8);
}

TEST_F(IdxFiles, MissingFile) {
  std::string p = (dir_ / "nope").string();
  expect_error([&] { read_idx(p); }, p, "does not exist");
}

TEST_F(IdxFiles, TruncatedMagic) {
  std::string p = write("short", {0, 0});
  expect_error([&] { read_idx(p); }, p, "truncated");
}

TEST_F(IdxFiles, WrongMagic) {
  std::string p = write("magic", {0x50, 0x4b, 3, 4, 0, 0, 0, 0});
  expect_error([&] { read_idx(p); }, p, "bad magic");
  std::string q = write("type", header(0x0D, {1}));
  expect_error([&] { read_idx(q); }, q, "element type");
}

TEST_F(IdxFiles, TruncatedHeaderAndData) {
  std::vector<uint8_t> h = header(0x08, {10, 28, 28});
  std::string p = write("head", std::vector<uint8_t>(h.begin(), h.begin() + 9));
  expect_error([&] { read_idx(p); }, p, "truncated inside its header");
  h.resize(h.size() + 100);
  std::string q = write("data", h);
  expect_error([&] { read_idx(q); }, q, "truncated");
}

TEST_F(IdxFiles, TrailingBytesMeanWrongCounts) {
  std::vector<uint8_t> b = header(0x08, {2});
  b.insert(b.end(), {1, 2, 3});
  std::string p = write("extra", b);
  expect_error([&] { read_idx(p); }, p, "bytes after");
}

TEST_F(IdxFiles, OversizedHeader) {
  std::string p = write("huge", header(0x08, {0xFFFFFFFF, 0xFFFF, 0xFFFF}));
  expect_error([&] { read_idx(p); }, p, "GiB");
}

// The process's peak resident memory so far, in MiB (Linux reports ru_maxrss in KiB).
int64_t peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) / 1024;
}

// A 16-byte file whose header claims 16384 x 512 x 512 bytes (4 GiB, within the absolute cap):
// the reader must compare the claim with what the file can hold before it allocates, so the
// process's peak memory does not move. Plain files have an exact size; a gzip stream can expand
// at most about 1032:1 (deflate's limit), so a 40-byte .gz cannot hold 4 GiB either.
TEST_F(IdxFiles, HugeHeaderOnAShortFileFailsBeforeAllocating) {
  std::vector<uint8_t> h = header(0x08, {16384, 512, 512});
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gzip" : "plain");
    std::string p = write(gz ? "huge.gz" : "huge", h, gz);
    int64_t before = peak_rss_mib();
    expect_error([&] { read_idx(p); }, p, "[16384, 512, 512]");
    expect_error([&] { read_idx(p); }, p, "4294967296 bytes");
    EXPECT_LT(peak_rss_mib() - before, 64) << "read_idx allocated what the header claimed";
  }
  // Some data present but far too little: the message says what the file holds.
  std::vector<uint8_t> some = h;
  some.resize(h.size() + 1000, 7);
  std::string p = write("some", some);
  expect_error([&] { read_idx(p); }, p, "1000 bytes");
}

// Behind gzip the claim is checked as the stream arrives: a .gz of incompressible data (so the
// expansion bound alone cannot reject it) that holds 1 MiB of the 256 MiB its header claims must
// fail on the short stream, with memory in proportion to what was decompressed.
TEST_F(IdxFiles, GzipShorterThanItsHeaderGrowsWithTheStream) {
  std::vector<uint8_t> b = header(0x08, {1024, 512, 512});
  uint32_t x = 12345;
  for (int i = 0; i < (1 << 20); ++i) {
    x = x * 1664525u + 1013904223u;  // a linear congruential generator: bytes gzip cannot shrink
    b.push_back(uint8_t(x >> 24));
  }
  std::string p = write("partial.gz", b, true);
  int64_t before = peak_rss_mib();
  expect_error([&] { read_idx(p); }, p, "truncated");
  expect_error([&] { read_idx(p); }, p, "1048576");
  EXPECT_LT(peak_rss_mib() - before, 64) << "read_idx allocated what the header claimed";
}

TEST_F(IdxFiles, CountMismatchAndLabelRange) {
  std::string img = images(3);
  std::string lab = labels({1, 2});
  expect_error([&] { load_idx(img, lab); }, lab, "3 images");
  std::string bad = labels({1, 12, 0});
  expect_error([&] { load_idx(img, bad); }, bad, "label 12 at index 1");
}

// The MNIST layout with more than 10 classes (EMNIST, KMNIST-49): labels are checked against the
// classes asked for, 10 unless told.
TEST_F(IdxFiles, MnistLayoutTakesTheClassCountItIsGiven) {
  fs::rename(images(3), dir_ / "train-images-idx3-ubyte");
  fs::rename(labels({1, 25, 0}), dir_ / "train-labels-idx1-ubyte");
  Dataset d = load_mnist_layout(dir_.string(), "train", "letters", 26);
  EXPECT_EQ(d.num_classes, 26);
  EXPECT_EQ(d.labels.to_int_vector(), (std::vector<int64_t>{1, 25, 0}));
  expect_error([&] { load_mnist_layout(dir_.string(), "train", "letters"); },
               "train-labels-idx1-ubyte", "label 25 at index 1 is out of range for 10 classes");
}

TEST(FashionMnist, DebianPackageLoads) {
  std::string dir = default_data_dir("fashion-mnist");
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " missing (install dataset-fashion-mnist)";
  Dataset test = load_mnist_layout(dir, "test", "fashion-mnist");
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(test.sample_shape(), (Shape{28, 28}));
  std::vector<int64_t> counts(10, 0);
  for (int64_t l : test.labels.to_int_vector()) counts[l]++;
  for (int64_t c : counts) EXPECT_EQ(c, 1000) << "Fashion-MNIST's test set is balanced";
}

}  // namespace
}  // namespace freight::data
