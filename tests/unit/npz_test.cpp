// The .npz reader against archives written here: stored and deflated entries, a ZIP64
// directory, and every way an archive can be broken (directory, local header, data, CRC,
// compression method), each a freight::Error naming the archive and the entry.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/array_files.h"
#include "common/test_util.h"
#include "freight/data/npz.h"

namespace freight::data {
namespace {

namespace fs = std::filesystem;
using test::has;
using test::ZipEntry;

class NpzFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_npz_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    std::vector<float> x(12);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.25f - 1.0f;
    x_ = test::npy_of("<f4", {3, 4}, x);
    y_ = test::npy_of("<i8", {3}, std::vector<int64_t>{2, 0, 1});
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    return test::write_file(dir_ / name, bytes);
  }
  std::string archive(bool deflate, bool zip64 = false) {
    return test::zip_file({{"x.npy", x_, deflate}, {"y.npy", y_, deflate}}, zip64);
  }
  // The error reading array `name` of an archive holding `bytes`; checks it names the archive.
  std::string error_reading(const std::string& bytes, const std::string& name = "x") {
    std::string p = write("bad.npz", bytes);
    std::string m = test::error_of([&] { NpzFile(p).read(name); });
    EXPECT_TRUE(has(m, "NumPy archive '" + p + "'")) << m;
    return m;
  }
  static void expect_xy(const NpzFile& f) {
    EXPECT_EQ(f.names(), (std::vector<std::string>{"x", "y"}));
    Tensor x = f.read("x"), y = f.read("y");
    ASSERT_EQ(x.shape(), (Shape{3, 4}));
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(x.data<float>()[i], float(i) * 0.25f - 1.0f);
    ASSERT_EQ(y.shape(), (Shape{3}));
    EXPECT_EQ(y.data<int64_t>()[0], 2);
    EXPECT_EQ(y.data<int64_t>()[2], 1);
  }
  // Byte offset of the first occurrence of `what` in `s`.
  static size_t at(const std::string& s, const std::string& what, size_t from = 0) {
    size_t p = s.find(what, from);
    EXPECT_NE(p, std::string::npos);
    return p;
  }
  fs::path dir_;
  std::string x_, y_;
};

TEST_F(NpzFiles, StoredDeflatedAndZip64ReadBackExactly) {
  for (bool deflate : {false, true})
    for (bool zip64 : {false, true}) {
      SCOPED_TRACE(std::string(deflate ? "deflate" : "stored") + (zip64 ? " zip64" : ""));
      NpzFile f(write("a.npz", archive(deflate, zip64)));
      EXPECT_TRUE(f.contains("x"));
      EXPECT_FALSE(f.contains("x.npy"));
      expect_xy(f);
    }
  // Mixed methods, a comment after the end record, an entry that is not .npy.
  std::string mixed = test::zip_file({{"x.npy", x_, true}, {"y.npy", y_}, {"notes.txt", "hi"}});
  mixed[mixed.size() - 2] = 5;  // comment length
  mixed += "hello";
  NpzFile f(write("m.npz", mixed));
  EXPECT_TRUE(f.contains("notes.txt"));
  Tensor x = f.read("x");
  EXPECT_EQ(x.data<float>()[11], 1.75f);
  std::string m = test::error_of([&] { f.read("notes.txt"); });
  EXPECT_TRUE(has(m, "entry 'notes.txt' is not a .npy array")) << m;
}

TEST_F(NpzFiles, MissingArrayListsWhatTheArchiveHolds) {
  std::string m = error_reading(archive(false), "x_test");
  EXPECT_TRUE(has(m, "has no array 'x_test' (no entry 'x_test.npy'); it holds x, y")) << m;
  m = error_reading(test::zip_file({}), "x");
  EXPECT_TRUE(has(m, "it holds no arrays")) << m;
}

TEST_F(NpzFiles, NotAZipOrATruncatedOne) {
  EXPECT_TRUE(has(error_reading("PK"), "shorter than a zip file's 22-byte end record"));
  EXPECT_TRUE(has(error_reading(x_), "no end-of-central-directory record"));
  std::string a = archive(false);
  EXPECT_TRUE(has(error_reading(a.substr(0, a.size() - 30)), "no end-of-central-directory"));
  // The file cut inside the central directory: the end record (rewritten) points past the end.
  std::string cut = a.substr(0, at(a, "PK\x01\x02") + 10) + a.substr(a.size() - 22);
  EXPECT_TRUE(has(error_reading(cut), "runs past the end of the"));
}

TEST_F(NpzFiles, CorruptCentralDirectory) {
  std::string a = archive(false);
  size_t cd = at(a, "PK\x01\x02");
  std::string sig = a;
  sig[cd + 2] = 9;
  EXPECT_TRUE(has(error_reading(sig), "central directory record 1 of 2"));
  EXPECT_TRUE(has(error_reading(sig), "bad signature"));
  std::string count = a;
  count[a.size() - 12] = char(200);  // entries: 200 in a directory of two records
  EXPECT_TRUE(has(error_reading(count), "claims 200 entries"));
  std::string name = a;
  name[cd + 28] = char(0xff);  // name length beyond the directory
  EXPECT_TRUE(has(error_reading(name), "runs past the end of the central directory"));
  std::string dup = test::zip_file({{"x.npy", x_}, {"x.npy", y_}});
  EXPECT_TRUE(has(error_reading(dup), "holds the array 'x' twice"));
  std::string split = a;
  split[a.size() - 18] = 1;  // the disk holding the central directory
  EXPECT_TRUE(has(error_reading(split), "spans several disks"));
  // A ZIP64 end record whose locator points nowhere.
  std::string z = archive(false, true);
  size_t loc = at(z, "PK\x06\x07");
  z[loc + 8] = char(z[loc + 8] + 1);
  EXPECT_TRUE(has(error_reading(z), "where there is no ZIP64 end record"));
}

TEST_F(NpzFiles, BrokenLocalHeadersAndData) {
  std::string a = archive(false);
  std::string local = a;
  local[2] = 9;
  std::string m = error_reading(local);
  EXPECT_TRUE(has(m, "entry 'x.npy' is corrupt: there is no local zip header at byte 0")) << m;
  std::string renamed = a;
  renamed[30] = 'z';  // the local header's copy of the name
  EXPECT_TRUE(has(error_reading(renamed), "names a different entry"));
  // The central directory records more compressed bytes than the file holds.
  std::string big = a;
  size_t cd = at(a, "PK\x01\x02");
  big[cd + 23] = 0x10;  // compressed size += 2^28
  big[cd + 27] = 0x10;  // uncompressed size, the same
  m = error_reading(big);
  EXPECT_TRUE(has(m, "entry 'x.npy' is truncated") && has(m, "run past the end")) << m;
  std::string sizes = a;
  sizes[cd + 24] = char(sizes[cd + 24] + 1);  // stored, but the sizes differ
  EXPECT_TRUE(has(error_reading(sizes), "it is stored (not compressed) but"));
}

TEST_F(NpzFiles, CrcMismatchStoredAndDeflated) {
  std::string a = archive(false);
  for (size_t byte : {x_.size() - 1, size_t(100)}) {  // a data byte of x, a header byte
    std::string flipped = a;
    flipped[at(a, "x.npy") + 5 + byte] ^= 1;
    std::string m = error_reading(flipped);
    EXPECT_TRUE(has(m, "entry 'x.npy' is corrupt: its CRC-32 is")) << m;
  }
  std::string crc = archive(true);
  crc[at(crc, "PK\x01\x02") + 16] ^= 1;  // the recorded CRC
  std::string m = error_reading(crc);
  EXPECT_TRUE(has(m, "entry 'x.npy' is corrupt: its CRC-32 is")) << m;
}

TEST_F(NpzFiles, CorruptOrShortDeflateStreams) {
  std::string body = test::raw_deflate(x_);
  std::string bad = body;
  bad[0] = char(0xff);  // block type 3: invalid
  std::string m =
      error_reading(test::zip_file({{"x.npy", x_, true}}).replace(35, body.size(), bad));
  EXPECT_TRUE(has(m, "entry 'x.npy' is corrupt: inflating it failed")) << m;
  // The recorded uncompressed size larger, then smaller, than what the stream holds.
  std::string a = test::zip_file({{"x.npy", x_, true}});
  size_t cd = at(a, "PK\x01\x02");
  std::string more = a;
  more[cd + 24] = char(more[cd + 24] + 1);
  m = error_reading(more);
  EXPECT_TRUE(has(m, "is truncated: it inflates to " + std::to_string(x_.size()))) << m;
  std::string less = a;
  less[cd + 24] = char(less[cd + 24] - 1);
  EXPECT_TRUE(has(error_reading(less), "inflates to more than"));
  // The compressed size cut short: the stream ends before its end marker.
  std::string cut = a;
  cut[cd + 20] = char(cut[cd + 20] - 8);
  EXPECT_TRUE(has(error_reading(cut), "before the end of the stream"));
  // An uncompressed size no deflate stream of that length can reach.
  std::string ratio = a;
  ratio[cd + 27] = 0x40;
  EXPECT_TRUE(has(error_reading(ratio), "more than deflate can expand"));
}

TEST_F(NpzFiles, UnsupportedMethodsAndEncryption) {
  std::string a = archive(false);
  size_t cd = at(a, "PK\x01\x02");
  std::string bz = a;
  bz[cd + 10] = 12;
  std::string m = error_reading(bz);
  EXPECT_TRUE(has(m, "entry 'x.npy' is compressed with zip method 12 (bzip2)")) << m;
  std::string enc = a;
  enc[cd + 8] = 1;
  EXPECT_TRUE(has(error_reading(enc), "entry 'x.npy' is encrypted"));
}

TEST_F(NpzFiles, BadArrayInsideAnEntryNamesTheEntry) {
  std::string trunc = x_.substr(0, x_.size() - 4);
  std::string m = error_reading(test::zip_file({{"x.npy", trunc, true}}));
  EXPECT_TRUE(has(m, "entry 'x.npy' is truncated: its header describes shape [3, 4]")) << m;
  std::string be = test::npy_file(test::npy_dict(">i8", {1}), std::string(8, '\0'));
  m = error_reading(test::zip_file({{"x.npy", be}}));
  EXPECT_TRUE(has(m, "entry 'x.npy' is big-endian")) << m;
}

}  // namespace
}  // namespace freight::data
