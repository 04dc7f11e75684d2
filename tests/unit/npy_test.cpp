// The .npy reader against files written here: every dtype and version reads back exactly, and
// every malformed file is a freight::Error naming the file and what is wrong, allocating nothing
// that the file cannot hold.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/array_files.h"
#include "common/test_util.h"
#include "freight/data/npy.h"

namespace freight::data {
namespace {

namespace fs = std::filesystem;
using test::has;

class NpyFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_npy_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    return test::write_file(dir_ / name, bytes);
  }
  // The error reading `bytes` as a .npy file; checks that it names the file.
  std::string error_reading(const std::string& bytes) {
    std::string p = write("bad.npy", bytes);
    std::string m = test::error_of([&] { read_npy(p); });
    EXPECT_TRUE(has(m, "NumPy file '" + p + "'")) << m;
    return m;
  }
  fs::path dir_;
};

template <class T>
void expect_values(const Tensor& t, const std::vector<T>& want) {
  ASSERT_EQ(t.dtype(), dtype_of<T>());
  ASSERT_EQ(size_t(t.numel()), want.size());
  EXPECT_EQ(std::memcmp(t.data_ptr(), want.data(), want.size() * sizeof(T)), 0);
}

TEST_F(NpyFiles, EveryDtypeAndVersionReadsBackExactly) {
  std::vector<uint8_t> u8{0, 1, 127, 128, 255, 42};
  std::vector<int32_t> i32{-2147483647 - 1, -1, 0, 1, 2147483647, 7};
  std::vector<int64_t> i64{INT64_MIN, -1, 0, 1, INT64_MAX, 1234567890123};
  std::vector<float> f32{-0.0f, 1.5f, -3.25e-20f, 3.0e38f, 1.17549435e-38f, 0.1f};
  std::vector<double> f64{-0.0, 1e-300, 1e300, 0.1, -2.5, 3.141592653589793};
  for (int major : {1, 2, 3}) {
    SCOPED_TRACE("version " + std::to_string(major));
    Tensor a = read_npy(write("u8.npy", test::npy_of("|u1", {2, 3}, u8, major)));
    EXPECT_EQ(a.shape(), (Shape{2, 3}));
    expect_values(a, u8);
    expect_values(read_npy(write("i32.npy", test::npy_of("<i4", {6}, i32, major))), i32);
    expect_values(read_npy(write("i64.npy", test::npy_of("<i8", {3, 2}, i64, major))), i64);
    Tensor f = read_npy(write("f32.npy", test::npy_of("<f4", {1, 2, 3}, f32, major)));
    EXPECT_EQ(f.shape(), (Shape{1, 2, 3}));
    expect_values(f, f32);
    expect_values(read_npy(write("f64.npy", test::npy_of("<f8", {6}, f64, major))), f64);
  }
}

TEST_F(NpyFiles, ScalarsEmptyArraysAndHeaderSpellings) {
  Tensor s = read_npy(write("s.npy", test::npy_of("<f8", {}, std::vector<double>{2.5})));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.data<double>()[0], 2.5);
  Tensor e = read_npy(write("e.npy", test::npy_of("<f4", {0, 3}, std::vector<float>{})));
  EXPECT_EQ(e.shape(), (Shape{0, 3}));
  // Double quotes, keys in another order, Python 2 longs, no trailing comma, '=' and '>u1'.
  std::string data = test::bytes_of(std::vector<int64_t>{5, 6});
  for (const char* dict : {R"({"shape": (2L,), "fortran_order": False, "descr": "<i8"})",
                           "{'descr':'=i8','fortran_order':False,'shape':(2,)}"}) {
    Tensor t = read_npy(write("h.npy", test::npy_file(dict, data)));
    EXPECT_EQ(t.shape(), (Shape{2}));
    EXPECT_EQ(t.data<int64_t>()[1], 6);
  }
  Tensor b = read_npy(write("b.npy", test::npy_file("{'descr': '>u1', 'fortran_order': False, "
                                                    "'shape': (1,)}",
                                                    "\x07")));
  EXPECT_EQ(b.data<uint8_t>()[0], 7);
}

TEST_F(NpyFiles, BadPreambleMagicVersionAndLength) {
  EXPECT_TRUE(has(error_reading("PK\x03\x04 a zip file"), "does not start with the magic"));
  EXPECT_TRUE(has(error_reading(""), "does not start with the magic"));
  EXPECT_TRUE(has(error_reading("\x93NUMPY\x01"), "shorter than the 10-byte .npy preamble"));
  std::string v4 = test::npy_of("<f4", {1}, std::vector<float>{1});
  v4[6] = 4;
  EXPECT_TRUE(has(error_reading(v4), "version 4.0"));
  std::string v2 = test::npy_of("<f4", {1}, std::vector<float>{1}, 2);
  EXPECT_TRUE(has(error_reading(v2.substr(0, 11)), "shorter than the 12-byte .npy 2.0 preamble"));
  // A header length beyond the file, and a huge one (version 2's 4 bytes) in a small file.
  std::string longer = test::npy_of("<f4", {1}, std::vector<float>{1});
  longer[8] = char(0xff), longer[9] = char(0x7f);
  EXPECT_TRUE(has(error_reading(longer), "announces a 32767-byte header but only"));
  v2[8] = v2[9] = v2[10] = v2[11] = char(0xff);
  EXPECT_TRUE(has(error_reading(v2), "4294967295-byte header"));
}

TEST_F(NpyFiles, BadHeaders) {
  auto with = [](const std::string& dict) { return test::npy_file(dict, std::string(4, '\0')); };
  struct Case {
    std::string dict, fragment;
  };
  const Case cases[] = {
      {"{'descr': '<f4', 'shape': (1,)}", "the key 'fortran_order' is missing"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 'y'}", "unknown key 'x'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
       "'descr' appears twice"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", "not a string, True/False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", "non-negative integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", "'shape' is a list"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}", "structured"},
      {"{'descr': '<f4', 'fortran_order': 'no', 'shape': (1,)}", "not True or False"},
      {"{'descr': 4, 'fortran_order': False, 'shape': (1,)}", "not a string, True/False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} junk", "text after the closing"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", "expected ','"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", "expected ',' (at character 17"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}", "expected ':'"},
      {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (1,)}", "escapes"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
       "more than 2^63 bytes"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296)}",
       "more than 2^63 bytes"},
      {"", "expected '{'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dict);
    std::string m = error_reading(with(c.dict));
    EXPECT_TRUE(has(m, c.fragment)) << m;
  }
}

TEST_F(NpyFiles, RefusesBigEndianFortranAndOtherDtypes) {
  std::string be = test::npy_file(test::npy_dict(">f4", {2}), std::string(8, '\0'));
  EXPECT_TRUE(has(error_reading(be), "big-endian (dtype '>f4')"));
  std::string fo = test::npy_file(test::npy_dict("<f4", {2, 3}, true), std::string(24, '\0'));
  std::string m = error_reading(fo);
  EXPECT_TRUE(has(m, "Fortran order")) << m;
  EXPECT_TRUE(has(m, "[2, 3]")) << m;
  for (const char* d : {"<f2", "|b1", "<U3", "|O", "<i2", "<u8", "<c8", "|S5", "<M8[s]"}) {
    SCOPED_TRACE(d);
    std::string e = error_reading(test::npy_file(test::npy_dict(d, {1}), std::string(8, '\0')));
    EXPECT_TRUE(has(e, std::string("dtype '") + d + "'") && has(e, "Freight does not read")) << e;
    // The advice fits labels too (float32 labels are refused as no class labels).
    EXPECT_TRUE(has(e, "class labels: y.astype(np.int64)")) << e;
  }
  EXPECT_TRUE(has(error_reading(test::npy_file(test::npy_dict("f", {1}), "")), "unknown dtype"));
}

TEST_F(NpyFiles, DataShorterOrLongerThanTheHeaderSays) {
  std::string full = test::npy_of("<f4", {2, 3}, std::vector<float>(6, 1.0f));
  std::string m = error_reading(full.substr(0, full.size() - 1));
  EXPECT_TRUE(has(m, "is truncated") && has(m, "shape [2, 3] of '<f4' (24 bytes of data)") &&
              has(m, "23 bytes follow"))
      << m;
  m = error_reading(full + "xyz");
  EXPECT_TRUE(has(m, "has 3 bytes after its data")) << m;
}

// A header that claims a terabyte in a file of a hundred bytes fails on the sizes alone: the
// message is the truncation, not an allocation failure.
TEST_F(NpyFiles, HugeShapeInASmallFileAllocatesNothing) {
  std::string m = error_reading(test::npy_file(test::npy_dict("<f8", {1 << 20, 1 << 20}), "abc"));
  EXPECT_TRUE(has(m, "is truncated") && has(m, "[1048576, 1048576]") &&
              has(m, "8796093022208 bytes of data"))
      << m;
}

TEST_F(NpyFiles, MissingFilesAndDirectories) {
  std::string m = test::error_of([&] { read_npy((dir_ / "none.npy").string()); });
  EXPECT_TRUE(has(m, "cannot open NumPy file") && has(m, "none.npy")) << m;
  m = test::error_of([&] { read_npy(dir_.string()); });
  EXPECT_TRUE(has(m, "is not a regular file (it is a directory)")) << m;
}

}  // namespace
}  // namespace freight::data
