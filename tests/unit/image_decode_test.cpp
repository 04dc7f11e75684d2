// PNG and JPEG decoding, channel conversion and resizing (freight/data/image.h) on files the
// tests write themselves: every PNG colour type decodes to the exact pixels, a JPEG to within
// its compression error, the resize equals a naive 2-D reference, and each broken file is a
// freight::Error naming the file and what is wrong.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/image_files.h"
#include "common/test_util.h"
#include "freight/data/image.h"
#include "freight/error.h"

namespace freight::data {
namespace {

namespace fs = std::filesystem;
using test::has;
using test::PngSpec;

class ImageDecode : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_image_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) { return (dir_ / name).string(); }
  std::string write_bytes(const std::string& name, const std::string& bytes) {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }
  static std::string read_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // Random samples below 2^bits.
  static std::vector<uint16_t> random_samples(size_t n, int bits, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint16_t> v(n);
    for (uint16_t& x : v) x = uint16_t(rng() % (1u << bits));
    return v;
  }
  static std::string error_of(const std::string& p) {
    return test::error_of([&] { decode_image(p); });
  }
  fs::path dir_;
};

PngSpec spec(int w, int h, int color, int depth, std::vector<uint16_t> samples) {
  PngSpec s;
  s.width = w;
  s.height = h;
  s.color_type = color;
  s.bit_depth = depth;
  s.samples = std::move(samples);
  return s;
}

TEST_F(ImageDecode, GrayAndRgbPngAreExact) {
  std::vector<uint16_t> gray = random_samples(7 * 5, 8, 1);
  test::write_png(path("g.png"), spec(7, 5, PNG_COLOR_TYPE_GRAY, 8, gray));
  Image g = decode_image(path("g.png"));
  ASSERT_EQ(g.width, 7);
  ASSERT_EQ(g.height, 5);
  ASSERT_EQ(g.channels, 1);
  EXPECT_EQ(std::vector<uint16_t>(g.pixels.begin(), g.pixels.end()), gray);

  std::vector<uint16_t> rgb = random_samples(6 * 4 * 3, 8, 2);
  for (bool interlaced : {false, true}) {
    PngSpec s = spec(6, 4, PNG_COLOR_TYPE_RGB, 8, rgb);
    s.interlaced = interlaced;
    test::write_png(path("rgb.png"), s);
    Image c = decode_image(path("rgb.png"));
    ASSERT_EQ(c.channels, 3);
    EXPECT_EQ(std::vector<uint16_t>(c.pixels.begin(), c.pixels.end()), rgb) << interlaced;
    EXPECT_EQ(c.at(3, 5, 2), rgb[(3 * 6 + 5) * 3 + 2]);
  }
}

TEST_F(ImageDecode, AlphaIsDropped) {
  std::vector<uint16_t> rgba = random_samples(5 * 3 * 4, 8, 3);
  test::write_png(path("rgba.png"), spec(5, 3, PNG_COLOR_TYPE_RGB_ALPHA, 8, rgba));
  Image c = decode_image(path("rgba.png"));
  ASSERT_EQ(c.channels, 3);
  for (size_t p = 0; p < 15; ++p)
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(c.pixels[p * 3 + k], rgba[p * 4 + k]);

  std::vector<uint16_t> ga = random_samples(4 * 4 * 2, 8, 4);
  test::write_png(path("ga.png"), spec(4, 4, PNG_COLOR_TYPE_GRAY_ALPHA, 8, ga));
  Image g = decode_image(path("ga.png"));
  ASSERT_EQ(g.channels, 1);
  for (size_t p = 0; p < 16; ++p) EXPECT_EQ(g.pixels[p], ga[p * 2]);
}

TEST_F(ImageDecode, PaletteExpandsToRgbWithOrWithoutTransparency) {
  std::vector<std::array<uint8_t, 3>> palette{{255, 0, 0}, {0, 128, 255}, {17, 34, 51}, {9, 9, 9}};
  for (int depth : {2, 8}) {
    for (bool trns : {false, true}) {
      PngSpec s = spec(5, 2, PNG_COLOR_TYPE_PALETTE, depth, {0, 1, 2, 3, 1, 3, 2, 1, 0, 0});
      s.palette = palette;
      if (trns) s.trns = {0, 128};
      test::write_png(path("p.png"), s);
      Image c = decode_image(path("p.png"));
      ASSERT_EQ(c.channels, 3);
      for (size_t p = 0; p < s.samples.size(); ++p)
        for (size_t k = 0; k < 3; ++k)
          EXPECT_EQ(c.pixels[p * 3 + k], palette[s.samples[p]][k]) << depth << trns << p;
    }
  }
}

TEST_F(ImageDecode, SixteenBitScalesToEightExactly) {
  std::vector<uint16_t> v = random_samples(4 * 3 * 3, 16, 5);
  v[0] = 0, v[1] = 65535, v[2] = 257 * 100;
  test::write_png(path("16.png"), spec(4, 3, PNG_COLOR_TYPE_RGB, 16, v));
  Image c = decode_image(path("16.png"));
  ASSERT_EQ(c.channels, 3);
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_EQ(c.pixels[i], uint8_t(std::lround(double(v[i]) * 255.0 / 65535.0))) << v[i];
  EXPECT_EQ(c.pixels[0], 0);
  EXPECT_EQ(c.pixels[1], 255);
  EXPECT_EQ(c.pixels[2], 100);

  std::vector<uint16_t> ga = random_samples(3 * 3 * 2, 16, 6);
  test::write_png(path("16ga.png"), spec(3, 3, PNG_COLOR_TYPE_GRAY_ALPHA, 16, ga));
  Image g = decode_image(path("16ga.png"));
  ASSERT_EQ(g.channels, 1);
  for (size_t p = 0; p < 9; ++p)
    EXPECT_EQ(g.pixels[p], uint8_t(std::lround(double(ga[p * 2]) * 255.0 / 65535.0)));
}

TEST_F(ImageDecode, LowBitGrayExpands) {
  test::write_png(path("1.png"), spec(9, 1, PNG_COLOR_TYPE_GRAY, 1, {0, 1, 1, 0, 1, 0, 0, 0, 1}));
  Image one = decode_image(path("1.png"));
  EXPECT_EQ(one.pixels, (std::vector<uint8_t>{0, 255, 255, 0, 255, 0, 0, 0, 255}));
  test::write_png(path("4.png"), spec(3, 1, PNG_COLOR_TYPE_GRAY, 4, {0, 7, 15}));
  Image four = decode_image(path("4.png"));
  EXPECT_EQ(four.pixels, (std::vector<uint8_t>{0, 7 * 17, 255}));
}

TEST_F(ImageDecode, JpegIsCloseAndNamedByContentNotExtension) {
  const int w = 24, h = 16;
  std::vector<uint8_t> rgb(size_t(w * h * 3));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      rgb[size_t((y * w + x) * 3 + 0)] = uint8_t(10 * x);
      rgb[size_t((y * w + x) * 3 + 1)] = uint8_t(15 * y);
      rgb[size_t((y * w + x) * 3 + 2)] = 128;
    }
  test::write_jpeg(path("c.jpg"), w, h, 3, rgb, 95);
  fs::copy_file(path("c.jpg"), path("really_a_jpeg.png"));
  for (const char* name : {"c.jpg", "really_a_jpeg.png"}) {
    Image c = decode_image(path(name));
    ASSERT_EQ(c.channels, 3);
    ASSERT_EQ(c.width, w);
    ASSERT_EQ(c.height, h);
    double sum = 0;
    int worst = 0;
    for (size_t i = 0; i < rgb.size(); ++i) {
      int d = std::abs(int(c.pixels[i]) - int(rgb[i]));
      sum += d;
      worst = std::max(worst, d);
    }
    EXPECT_LT(sum / double(rgb.size()), 3.0) << name;
    EXPECT_LE(worst, 24) << name;
  }
  test::write_jpeg(path("g.jpeg"), w, h, 1, std::vector<uint8_t>(size_t(w * h), 77), 90);
  Image g = decode_image(path("g.jpeg"));
  ASSERT_EQ(g.channels, 1);
  for (uint8_t v : g.pixels) EXPECT_NEAR(int(v), 77, 1);
}

TEST_F(ImageDecode, BrokenFilesNameTheFileAndTheFault) {
  test::write_png(path("ok.png"), spec(16, 16, PNG_COLOR_TYPE_RGB, 8, random_samples(768, 8, 7)));
  std::string png = read_bytes(path("ok.png"));
  std::string p = write_bytes("cut.png", png.substr(0, png.size() / 2));
  EXPECT_TRUE(has(error_of(p), p) && has(error_of(p), "truncated")) << error_of(p);
  std::string corrupt = png;
  for (size_t i = 60; i < 80 && i < corrupt.size(); ++i) corrupt[i] = char(corrupt[i] ^ 0x5a);
  p = write_bytes("corrupt.png", corrupt);
  EXPECT_TRUE(has(error_of(p), p) && has(error_of(p), "PNG")) << error_of(p);
  p = write_bytes("notes.png", "these are my notes, not an image\n");
  EXPECT_TRUE(has(error_of(p), p) && has(error_of(p), "not a PNG or JPEG")) << error_of(p);
  p = write_bytes("anim.png", std::string("GIF89a\x01\x00\x01\x00", 10));
  EXPECT_TRUE(has(error_of(p), p) && has(error_of(p), "GIF image")) << error_of(p);
  p = write_bytes("empty.jpg", "");
  EXPECT_TRUE(has(error_of(p), p) && has(error_of(p), "empty")) << error_of(p);
  p = path("missing.png");
  EXPECT_TRUE(has(error_of(p), p)) << error_of(p);

  std::vector<uint16_t> noise = random_samples(64 * 64 * 3, 8, 8);
  test::write_jpeg(path("ok.jpg"), 64, 64, 3, std::vector<uint8_t>(noise.begin(), noise.end()), 90);
  std::string jpg = read_bytes(path("ok.jpg"));
  p = write_bytes("cut.jpg", jpg.substr(0, jpg.size() * 2 / 3));  // in the scan data
  EXPECT_TRUE(has(error_of(p), p) && has(error_of(p), "truncated")) << error_of(p);
  p = write_bytes("head.jpg", jpg.substr(0, 100));  // in the tables
  EXPECT_TRUE(has(error_of(p), p) && has(error_of(p), "JPEG") && has(error_of(p), "truncated"))
      << error_of(p);
  test::write_jpeg(path("cmyk.jpg"), 8, 8, 4, std::vector<uint8_t>(8 * 8 * 4, 50), 90);
  p = path("cmyk.jpg");
  EXPECT_TRUE(has(error_of(p), p) && has(error_of(p), "CMYK")) << error_of(p);
}

TEST_F(ImageDecode, HugeDimensionsAreRefusedBeforeAllocating) {
  // A valid PNG header claiming 30000 x 30000 (9e8 pixels, over the 2^26 cap), no pixel data.
  test::write_png(path("small.png"), spec(1, 1, PNG_COLOR_TYPE_GRAY, 8, {0}));
  std::string png = read_bytes(path("small.png"));
  // IHDR's width and height sit at bytes 16..23; the CRC after them is then wrong, so patch it.
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) png[at + size_t(i)] = char(v >> (24 - 8 * i));
  };
  // Also one side beyond the 32768 a side (libpng's own limit then, whose error alone says only
  // "Invalid IHDR data"), the other within it, and a zero side.
  for (auto [w, h] :
       {std::pair<uint32_t, uint32_t>{30000, 30000}, {40000, 1}, {1, 40000}, {0, 5}}) {
    put32(16, w);
    put32(20, h);
    put32(29, uint32_t(crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17)));
    std::string p = write_bytes("huge.png", png);
    std::string e = error_of(p);
    EXPECT_TRUE(has(e, p) && has(e, fmt::format("{}x{}", w, h)) &&
                has(e, w && h ? "larger than" : "gives a size"))
        << e;
  }
}

TEST(ImageConvert, ChannelsFollowBt601Luma) {
  Image rgb{1, 3, 3, {255, 0, 0, 0, 255, 0, 10, 20, 30}};
  Image g = convert_channels(rgb, 1);
  ASSERT_EQ(g.channels, 1);
  EXPECT_EQ(g.pixels,
            (std::vector<uint8_t>{76, 150, (299 * 10 + 587 * 20 + 114 * 30 + 500) / 1000}));
  Image back = convert_channels(Image{1, 2, 1, {7, 200}}, 3);
  EXPECT_EQ(back.pixels, (std::vector<uint8_t>{7, 7, 7, 200, 200, 200}));
  EXPECT_TRUE(has(test::error_of([&] { convert_channels(rgb, 4); }), "not 4"));
}

// The weight of input pixel i in output pixel o along an axis of `in` -> `out`, from the
// definitions: area = overlap of [i, i+1) with o's footprint / its width; bilinear = the tent
// max(0, 1 - |x - i|) at o's centre mapped to the input (clamped to the first and last centres).
double naive_weight(int64_t in, int64_t out, int64_t o, int64_t i) {
  double s = double(in) / double(out);
  if (in == out) return o == i ? 1.0 : 0.0;
  if (out < in) {
    double lo = double(o) * s, hi = double(o + 1) * s;
    return std::max(0.0, std::min(hi, double(i + 1)) - std::max(lo, double(i))) / s;
  }
  double x = std::clamp((double(o) + 0.5) * s - 0.5, 0.0, double(in - 1));
  return std::max(0.0, 1.0 - std::abs(x - double(i)));
}

TEST(ImageResize, MatchesANaiveReference) {
  std::mt19937 rng(11);
  const std::pair<int, int> sizes[] = {{7, 5}, {16, 16}, {3, 9}, {28, 28}, {40, 31}, {1, 6}};
  int64_t checked = 0, exact = 0;
  for (auto [iw, ih] : sizes)
    for (auto [ow, oh] : sizes)
      for (int c : {1, 3}) {
        Image im{ih, iw, c, {}};
        for (int i = 0; i < iw * ih * c; ++i) im.pixels.push_back(uint8_t(rng() % 256));
        Image r = resize_image(im, oh, ow);
        ASSERT_EQ(r.width, ow);
        ASSERT_EQ(r.height, oh);
        ASSERT_EQ(r.channels, c);
        for (int y = 0; y < oh; ++y)
          for (int x = 0; x < ow; ++x)
            for (int k = 0; k < c; ++k) {
              double v = 0;
              for (int sy = 0; sy < ih; ++sy)
                for (int sx = 0; sx < iw; ++sx)
                  v += naive_weight(ih, oh, y, sy) * naive_weight(iw, ow, x, sx) * im.at(sy, sx, k);
              int want = int(std::clamp(std::floor(v + 0.5), 0.0, 255.0));
              int got = r.at(y, x, k);
              ASSERT_LE(std::abs(got - want), 1)
                  << iw << "x" << ih << " -> " << ow << "x" << oh << " at " << x << "," << y;
              exact += got == want;
              ++checked;
            }
      }
  // Off by one only where the two sums round a value of exactly .5 differently.
  EXPECT_GT(double(exact), 0.999 * double(checked)) << exact << " of " << checked;
}

TEST(ImageResize, AreaAverageAndConstantImages) {
  Image im{4, 4, 1, {0, 2, 10, 10, 4, 6, 10, 10, 1, 1, 50, 60, 1, 1, 70, 80}};
  Image half = resize_image(im, 2, 2);
  EXPECT_EQ(half.pixels, (std::vector<uint8_t>{3, 10, 1, 65}));
  Image flat{3, 5, 3, std::vector<uint8_t>(45, 123)};
  for (auto [h, w] : {std::pair{7, 11}, {2, 2}, {3, 1}})
    for (uint8_t v : resize_image(flat, h, w).pixels) EXPECT_EQ(v, 123);
}

}  // namespace
}  // namespace freight::data
