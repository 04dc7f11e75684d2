// Writes small PNG and JPEG files for the image-folder tests, with libpng and libjpeg directly,
// so the tests make their own data in every colour type the decoder handles.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace freight::test {

struct PngSpec {
  int width = 0, height = 0;
  int color_type = 0;  // PNG_COLOR_TYPE_GRAY (0), RGB (2), PALETTE (3), GRAY_ALPHA (4), RGBA (6)
  int bit_depth = 8;   // 1, 2, 4 (gray, palette), 8, 16
  // The samples as stored, row-major with the channels interleaved (a palette index is one
  // sample); each below 2^bit_depth.
  std::vector<uint16_t> samples;
  std::vector<std::array<uint8_t, 3>> palette;  // PALETTE only
  std::vector<uint8_t> trns;                    // PALETTE only: alpha of the first entries
  bool interlaced = false;
};
void write_png(const std::string& path, const PngSpec& png);

// An 8-bit gray (channels 1), RGB (3) or CMYK (4) JPEG of `pixels` ([height, width, channels]).
void write_jpeg(const std::string& path, int width, int height, int channels,
                const std::vector<uint8_t>& pixels, int quality = 95);

// Convenience: an 8-bit gray or RGB PNG of `pixels` ([height, width, channels]).
void write_png8(const std::string& path, int width, int height, int channels,
                const std::vector<uint8_t>& pixels);

}  // namespace freight::test
