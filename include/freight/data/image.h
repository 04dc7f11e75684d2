// Images in memory, the two formats Freight decodes (PNG through libpng, JPEG through
// libjpeg-turbo), and the two conversions an image folder needs to fit a model's input: the
// channel count and the size.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace freight::data {

struct Image {
  int64_t height = 0, width = 0;
  int channels = 0;             // 1 (gray) or 3 (RGB)
  std::vector<uint8_t> pixels;  // row-major [height, width, channels], channels interleaved

  uint8_t at(int64_t y, int64_t x, int c) const {
    return pixels[size_t((y * width + x) * channels + c)];
  }
};

// Largest image accepted, checked from the header before any pixel is allocated: at most 32768
// pixels a side and 2^26 pixels (8192 x 8192) in all: 192 MiB of RGB per image being decoded,
// on each decoding thread (PIL refuses images from about 179 million pixels).
inline constexpr int64_t kMaxImageSide = 32768;
inline constexpr int64_t kMaxImagePixels = int64_t(1) << 26;

// Decodes a PNG or a JPEG, told apart by their first bytes (not by the file name), to 8-bit gray
// or RGB as stored:
//   PNG: a palette is expanded to RGB, gray of 1, 2 or 4 bits to 8, 16-bit samples are scaled to
//        8 bits (v * 255 / 65535, rounded), an alpha channel (or a tRNS chunk) is dropped, as
//        PIL's convert("RGB") drops it; interlaced files are read whole.
//   JPEG: gray stays gray, YCbCr becomes RGB; CMYK and YCCK are refused. A file that ends before
//         its last scan is an error (libjpeg would pad it with gray); other warnings of libjpeg
//         (extraneous bytes, ...) are ignored, as PIL ignores them.
// Every error is a freight::Error naming `origin` (the file) and what is wrong: not an image,
// another format (GIF, BMP, WebP, TIFF named as such), truncated, corrupt, too large.
Image decode_image(const std::string& path);
Image decode_image(std::span<const uint8_t> bytes, const std::string& origin);
// The format `bytes` start with: "PNG", "JPEG", another format's name ("GIF", "BMP", ...), or ""
// when unknown.
std::string image_format(std::span<const uint8_t> bytes);

// Gray -> RGB repeats the gray value; RGB -> gray is the ITU-R BT.601 luma that PIL's
// convert("L") computes, (299 R + 587 G + 114 B) / 1000 rounded to nearest.
Image convert_channels(const Image& image, int channels);

// Resamples to height x width, each axis on its own (the aspect ratio is not kept, as
// torchvision's Resize((h, w)) does not keep it):
//   shrinking an axis: area average, each output pixel the mean of the input it covers, input
//                      pixels cut by its edges weighted by the part inside (OpenCV's INTER_AREA);
//   enlarging an axis: bilinear with pixel centres aligned (align_corners=False), edges clamped;
//   the same size:     a copy.
// Values are computed in double and rounded to nearest.
Image resize_image(const Image& image, int64_t height, int64_t width);

}  // namespace freight::data
