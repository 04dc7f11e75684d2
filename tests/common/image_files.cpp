#include "common/image_files.h"

#include <png.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
// clang-format off: jpeglib.h needs <cstdio>'s FILE before it
#include <jpeglib.h>
// clang-format on

namespace freight::test {

namespace {
struct FileCloser {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};
std::unique_ptr<FILE, FileCloser> open_for_writing(const std::string& path) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
  if (!f) throw std::runtime_error("cannot write " + path);
  return f;
}
int png_channels(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY:
      return 1;
    case PNG_COLOR_TYPE_PALETTE:
      return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      return 2;
    case PNG_COLOR_TYPE_RGB:
      return 3;
    default:
      return 4;
  }
}
}  // namespace

// (Valid input only: a libpng error here aborts the test program, which is what a broken test
// helper should do.)
void write_png(const std::string& path, const PngSpec& s) {
  auto f = open_for_writing(path);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, f.get());
  png_set_IHDR(png, info, png_uint_32(s.width), png_uint_32(s.height), s.bit_depth, s.color_type,
               s.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> palette;
  for (const auto& c : s.palette) palette.push_back({c[0], c[1], c[2]});
  if (s.color_type == PNG_COLOR_TYPE_PALETTE) {
    png_set_PLTE(png, info, palette.data(), int(palette.size()));
    if (!s.trns.empty()) png_set_tRNS(png, info, s.trns.data(), int(s.trns.size()), nullptr);
  }
  png_write_info(png, info);
  if (s.bit_depth < 8) png_set_packing(png);  // one byte per sample in, packed on the way out
  const int c = png_channels(s.color_type);
  const size_t bytes = s.bit_depth == 16 ? 2 : 1;
  std::vector<std::vector<png_byte>> rows(size_t(s.height));
  std::vector<png_bytep> pointers;
  for (int y = 0; y < s.height; ++y) {
    std::vector<png_byte>& row = rows[size_t(y)];
    for (int i = 0; i < s.width * c; ++i) {
      uint16_t v = s.samples[size_t(y * s.width * c + i)];
      if (bytes == 2) row.push_back(png_byte(v >> 8));  // big-endian
      row.push_back(png_byte(v & 0xff));
    }
    pointers.push_back(row.data());
  }
  png_write_image(png, pointers.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
}

void write_png8(const std::string& path, int width, int height, int channels,
                const std::vector<uint8_t>& pixels) {
  PngSpec s;
  s.width = width;
  s.height = height;
  s.color_type = channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB;
  s.samples.assign(pixels.begin(), pixels.end());
  write_png(path, s);
}

void write_jpeg(const std::string& path, int width, int height, int channels,
                const std::vector<uint8_t>& pixels, int quality) {
  auto f = open_for_writing(path);
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f.get());
  cinfo.image_width = JDIMENSION(width);
  cinfo.image_height = JDIMENSION(height);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : channels == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row =
        const_cast<JSAMPROW>(&pixels[size_t(cinfo.next_scanline) * size_t(width * channels)]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
}

}  // namespace freight::test
