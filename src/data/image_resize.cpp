// Channel conversion and resampling of decoded images (freight/data/image.h).
//
// The resampling is separable: along each axis every output pixel is a weighted sum of input
// pixels (area weights when the axis shrinks, bilinear when it grows), rows first, then columns.
// An area average over a rectangle is the product of the per-axis overlaps, and bilinear
// interpolation the product of the per-axis weights, so two passes give the 2-D results.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "freight/data/image.h"
#include "freight/error.h"

namespace freight::data {

namespace {
struct Tap {
  int64_t index;
  double weight;
};

// For each of `out` output pixels along an axis of `in` input pixels, the input pixels it reads.
std::vector<std::vector<Tap>> axis_taps(int64_t in, int64_t out) {
  std::vector<std::vector<Tap>> taps(static_cast<size_t>(out));
  const double scale = double(in) / double(out);
  for (int64_t o = 0; o < out; ++o) {
    std::vector<Tap>& t = taps[size_t(o)];
    if (in == out) {
      t.push_back({o, 1.0});
    } else if (out < in) {
      // Output pixel o covers input [o·scale, (o+1)·scale); each input pixel i in it weighs its
      // overlap with [i, i+1), divided by the width.
      const double lo = double(o) * scale, hi = double(o + 1) * scale;
      const int64_t first = int64_t(std::floor(lo));
      const int64_t last = std::min(in - 1, int64_t(std::ceil(hi)) - 1);
      for (int64_t i = first; i <= last; ++i) {
        double overlap = std::min(hi, double(i + 1)) - std::max(lo, double(i));
        if (overlap > 0) t.push_back({i, overlap / scale});
      }
    } else {
      // Output pixel o's centre o + 1/2 sits at input coordinate (o + 1/2)·scale, which is
      // between the centres of input pixels i0 and i0 + 1 (clamped at the edges).
      const double x = std::clamp((double(o) + 0.5) * scale - 0.5, 0.0, double(in - 1));
      const int64_t i0 = int64_t(std::floor(x));
      const int64_t i1 = std::min(i0 + 1, in - 1);
      const double f = x - double(i0);
      t.push_back({i0, 1.0 - f});
      if (f > 0) t.push_back({i1, f});
    }
  }
  return taps;
}

uint8_t to_byte(double v) {
  return uint8_t(std::clamp(std::floor(v + 0.5), 0.0, 255.0));
}
}  // namespace

Image convert_channels(const Image& image, int channels) {
  FREIGHT_CHECK(channels == 1 || channels == 3,
                fmt::format("images convert to 1 (gray) or 3 (RGB) channels, not {}", channels));
  FREIGHT_CHECK(image.channels == 1 || image.channels == 3,
                fmt::format("an image of {} channels; expected 1 or 3", image.channels));
  if (image.channels == channels) return image;
  Image out;
  out.height = image.height;
  out.width = image.width;
  out.channels = channels;
  const size_t n = size_t(image.height * image.width);
  out.pixels.resize(n * size_t(channels));
  const uint8_t* p = image.pixels.data();
  if (channels == 3) {
    for (size_t i = 0; i < n; ++i)
      out.pixels[3 * i] = out.pixels[3 * i + 1] = out.pixels[3 * i + 2] = p[i];
  } else {
    for (size_t i = 0; i < n; ++i)
      out.pixels[i] =
          uint8_t((299 * p[3 * i] + 587 * p[3 * i + 1] + 114 * p[3 * i + 2] + 500) / 1000);
  }
  return out;
}

Image resize_image(const Image& image, int64_t height, int64_t width) {
  FREIGHT_CHECK(height > 0 && width > 0 && image.height > 0 && image.width > 0,
                fmt::format("cannot resize an image of {}x{} to {}x{} (width x height)",
                            image.width, image.height, width, height));
  if (image.height == height && image.width == width) return image;
  const int64_t c = image.channels, in_w = image.width, in_h = image.height;
  // Rows: [in_h, width, c].
  std::vector<std::vector<Tap>> xt = axis_taps(in_w, width);
  std::vector<double> rows(static_cast<size_t>(in_h * width * c));
  for (int64_t y = 0; y < in_h; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int64_t k = 0; k < c; ++k) {
        double s = 0;
        for (const Tap& t : xt[size_t(x)])
          s += t.weight * double(image.pixels[size_t((y * in_w + t.index) * c + k)]);
        rows[size_t((y * width + x) * c + k)] = s;
      }
  // Columns: [height, width, c].
  std::vector<std::vector<Tap>> yt = axis_taps(in_h, height);
  Image out;
  out.height = height;
  out.width = width;
  out.channels = image.channels;
  out.pixels.resize(size_t(height * width * c));
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int64_t k = 0; k < c; ++k) {
        double s = 0;
        for (const Tap& t : yt[size_t(y)])
          s += t.weight * rows[size_t((t.index * width + x) * c + k)];
        out.pixels[size_t((y * width + x) * c + k)] = to_byte(s);
      }
  return out;
}

}  // namespace freight::data
