// PNG (libpng) and JPEG (libjpeg-turbo) decoding from memory.
//
// Both libraries report errors by longjmp (libjpeg's default even calls exit()), which skips C++
// destructors. So each step that may jump runs in a function of its own holding only trivially
// destructible locals, with setjmp at its top: a jump lands there and the function returns false.
// Buffers and the libraries' handles are owned one level up, by RAII, outside any jump.
#include <fmt/format.h>
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
// clang-format off: jpeglib.h needs <cstdio>'s FILE before it
#include <jerror.h>
#include <jpeglib.h>
// clang-format on

#include "freight/data/image.h"
#include "freight/error.h"

namespace freight::data {

namespace {
// A file larger than this is no image a training set holds (and reading it would be the
// allocation an attacker asks for).
constexpr uint64_t kMaxImageFileBytes = uint64_t(256) << 20;

void check_dimensions(int64_t width, int64_t height, const std::string& origin,
                      const char* format) {
  FREIGHT_CHECK(width > 0 && height > 0,
                fmt::format("image '{}': its {} header gives a size of {}x{} (width x height)",
                            origin, format, width, height));
  FREIGHT_CHECK(
      width <= kMaxImageSide && height <= kMaxImageSide && width * height <= kMaxImagePixels,
      fmt::format("image '{}': {} of {}x{} (width x height) is larger than Freight reads "
                  "(at most {} pixels a side, {} pixels in all)",
                  origin, format, width, height, kMaxImageSide, kMaxImagePixels));
}

// ---- PNG ----

struct PngInput {
  const uint8_t* data;
  size_t size, pos;
  char message[256];  // libpng's error text
};

[[noreturn]] void png_on_error(png_structp png, png_const_charp msg) {
  auto* in = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(in->message, sizeof in->message, "%s", msg ? msg : "unknown error");
  png_longjmp(png, 1);
}
void png_on_warning(png_structp, png_const_charp) {}  // (bad ancillary chunks: ignored)

void png_read_bytes(png_structp png, png_bytep out, size_t n) {
  auto* in = static_cast<PngInput*>(png_get_io_ptr(png));
  if (in->size - in->pos < n) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, in->data + in->pos, n);
  in->pos += n;
}

struct PngHandles {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngHandles() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

struct PngHeader {
  uint32_t width, height;
  int channels;  // after the transforms: 1 or 3
  size_t row_bytes;
};

// Reads the header and sets the transforms that make every PNG 8-bit gray or RGB.
[[gnu::noinline]] bool png_read_header(png_structp png, png_infop info, PngHeader* h) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_user_limits(png, uint32_t(kMaxImageSide), uint32_t(kMaxImageSide));
  png_read_info(png, info);
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_scale_16(png);
  // Always: expanding a palette also turns its tRNS chunk into an alpha channel.
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  h->width = png_get_image_width(png, info);
  h->height = png_get_image_height(png, info);
  h->channels = png_get_channels(png, info);
  h->row_bytes = png_get_rowbytes(png, info);
  return true;
}

[[gnu::noinline]] bool png_read_pixels(png_structp png, png_infop info, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, nullptr);  // up to IEND: a file cut after its pixels is still truncated
  return true;
}

// The size a PNG's IHDR chunk gives (the first chunk, at byte 8: length, "IHDR", then the width
// and the height as big-endian 32-bit numbers), checked before libpng reads it: libpng refuses a
// side beyond its user limits with a generic "Invalid IHDR data", its reason only a warning.
void check_png_size(std::span<const uint8_t> bytes, const std::string& origin) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (bytes.size() < 24 || std::memcmp(bytes.data(), kSignature, 8) != 0 ||
      std::memcmp(bytes.data() + 12, "IHDR", 4) != 0)
    return;  // libpng says what is wrong
  auto be32 = [&](size_t at) {
    return int64_t(bytes[at]) << 24 | int64_t(bytes[at + 1]) << 16 | int64_t(bytes[at + 2]) << 8 |
           int64_t(bytes[at + 3]);
  };
  check_dimensions(be32(16), be32(20), origin, "PNG");
}

Image decode_png(std::span<const uint8_t> bytes, const std::string& origin) {
  check_png_size(bytes, origin);
  PngInput in{bytes.data(), bytes.size(), 0, {0}};
  PngHandles h;
  h.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &in, png_on_error, png_on_warning);
  FREIGHT_CHECK(h.png, fmt::format("image '{}': libpng could not start", origin));
  h.info = png_create_info_struct(h.png);
  FREIGHT_CHECK(h.info, fmt::format("image '{}': libpng could not start", origin));
  png_set_read_fn(h.png, &in, png_read_bytes);
  PngHeader head{};
  FREIGHT_CHECK(png_read_header(h.png, h.info, &head),
                fmt::format("image '{}': not a readable PNG: {}", origin, in.message));
  check_dimensions(head.width, head.height, origin, "PNG");
  FREIGHT_CHECK((head.channels == 1 || head.channels == 3) &&
                    head.row_bytes == head.width * size_t(head.channels),
                fmt::format("image '{}': PNG decodes to {} channels of {} bytes a row; expected "
                            "gray or RGB of 8 bits",
                            origin, head.channels, head.row_bytes));
  Image im;
  im.width = head.width;
  im.height = head.height;
  im.channels = head.channels;
  im.pixels.resize(size_t(im.width * im.height * im.channels));
  std::vector<png_bytep> rows(static_cast<size_t>(im.height));
  for (int64_t y = 0; y < im.height; ++y) rows[size_t(y)] = &im.pixels[size_t(y) * head.row_bytes];
  FREIGHT_CHECK(
      png_read_pixels(h.png, h.info, rows.data()),
      fmt::format("image '{}': corrupt PNG ({}x{}): {}", origin, im.width, im.height, in.message));
  return im;
}

// ---- JPEG ----

struct JpegErrors {
  jpeg_error_mgr mgr;  // first: libjpeg hands back a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

[[noreturn]] void jpeg_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}
// Warnings (level -1): a premature end is recorded, the others are ignored; trace messages too.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) e->truncated = true;
}

struct JpegHandle {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  bool created = false;
  ~JpegHandle() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

[[gnu::noinline]] bool jpeg_read_head(JpegHandle* j, const uint8_t* data, size_t size) {
  if (setjmp(j->errors.jump)) return false;
  jpeg_create_decompress(&j->cinfo);
  j->created = true;
  jpeg_mem_src(&j->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&j->cinfo, TRUE);
  return true;
}

// Decodes into `out` (height rows of width x channels bytes), gray or RGB as `gray` says.
[[gnu::noinline]] bool jpeg_read_pixels(JpegHandle* j, bool gray, uint8_t* out, size_t row_bytes) {
  if (setjmp(j->errors.jump)) return false;
  j->cinfo.out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&j->cinfo);
  if (j->cinfo.output_components * j->cinfo.output_width != row_bytes) {
    std::snprintf(j->errors.message, sizeof j->errors.message,
                  "it decodes to rows of %u x %d bytes, not the %zu its header promised",
                  j->cinfo.output_width, j->cinfo.output_components, row_bytes);
    return false;
  }
  while (j->cinfo.output_scanline < j->cinfo.output_height) {
    JSAMPROW row = out + size_t(j->cinfo.output_scanline) * row_bytes;
    jpeg_read_scanlines(&j->cinfo, &row, 1);
  }
  jpeg_finish_decompress(&j->cinfo);
  return true;
}

Image decode_jpeg(std::span<const uint8_t> bytes, const std::string& origin) {
  JpegHandle j;
  j.cinfo.err = jpeg_std_error(&j.errors.mgr);
  j.errors.mgr.error_exit = jpeg_on_error;
  j.errors.mgr.emit_message = jpeg_on_message;
  j.errors.message[0] = 0;
  j.errors.truncated = false;
  // (A file that ends early makes libjpeg warn, then read a made-up end marker, on which it
  // may fail: the truncation is the cause to name.)
  auto ended_early = [&] {
    return j.errors.truncated
               ? fmt::format(" (the file ends early: truncated, {} bytes)", bytes.size())
               : std::string();
  };
  FREIGHT_CHECK(jpeg_read_head(&j, bytes.data(), bytes.size()),
                fmt::format("image '{}': not a readable JPEG: {}{}", origin, j.errors.message,
                            ended_early()));
  check_dimensions(j.cinfo.image_width, j.cinfo.image_height, origin, "JPEG");
  const J_COLOR_SPACE space = j.cinfo.jpeg_color_space;
  FREIGHT_CHECK(space != JCS_CMYK && space != JCS_YCCK,
                fmt::format("image '{}': a {} JPEG, which Freight does not read (gray and "
                            "RGB/YCbCr only); convert it to RGB",
                            origin, space == JCS_CMYK ? "CMYK" : "YCCK"));
  FREIGHT_CHECK(space == JCS_GRAYSCALE || space == JCS_YCbCr || space == JCS_RGB,
                fmt::format("image '{}': a JPEG of {} components in an unknown colour space "
                            "({}); Freight reads gray and RGB/YCbCr",
                            origin, j.cinfo.num_components, int(space)));
  Image im;
  im.width = j.cinfo.image_width;
  im.height = j.cinfo.image_height;
  im.channels = space == JCS_GRAYSCALE ? 1 : 3;
  im.pixels.resize(size_t(im.width * im.height * im.channels));
  bool ok =
      jpeg_read_pixels(&j, im.channels == 1, im.pixels.data(), size_t(im.width * im.channels));
  FREIGHT_CHECK(ok, fmt::format("image '{}': corrupt JPEG ({}x{}): {}{}", origin, im.width,
                                im.height, j.errors.message, ended_early()));
  FREIGHT_CHECK(!j.errors.truncated,
                fmt::format("image '{}': the JPEG ({}x{}) ends before its last scan "
                            "(truncated; {} bytes)",
                            origin, im.width, im.height, bytes.size()));
  return im;
}

bool starts_with(std::span<const uint8_t> b, std::initializer_list<uint8_t> magic) {
  return b.size() >= magic.size() && std::equal(magic.begin(), magic.end(), b.begin());
}
}  // namespace

std::string image_format(std::span<const uint8_t> b) {
  if (starts_with(b, {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'})) return "PNG";
  if (starts_with(b, {0xff, 0xd8, 0xff})) return "JPEG";
  if (starts_with(b, {'G', 'I', 'F', '8'})) return "GIF";
  if (starts_with(b, {'B', 'M'})) return "BMP";
  if (starts_with(b, {'I', 'I', '*', 0}) || starts_with(b, {'M', 'M', 0, '*'})) return "TIFF";
  if (b.size() >= 12 && starts_with(b, {'R', 'I', 'F', 'F'}) &&
      std::memcmp(b.data() + 8, "WEBP", 4) == 0)
    return "WebP";
  if (b.size() >= 12 && std::memcmp(b.data() + 4, "ftyp", 4) == 0) return "HEIF/AVIF";
  return "";
}

Image decode_image(std::span<const uint8_t> bytes, const std::string& origin) {
  std::string format = image_format(bytes);
  if (format == "PNG") return decode_png(bytes, origin);
  if (format == "JPEG") return decode_jpeg(bytes, origin);
  FREIGHT_CHECK(!bytes.empty(), fmt::format("image '{}' is empty (0 bytes)", origin));
  FREIGHT_CHECK(format.empty(),
                fmt::format("image '{}' is a {} image; Freight reads PNG and JPEG only (convert "
                            "it, e.g. with ImageMagick: convert in out.png)",
                            origin, format));
  std::string head;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i)
    head += fmt::format("{}{:02x}", i ? " " : "", bytes[i]);
  throw Error(
      fmt::format("image '{}' is not a PNG or JPEG image: it starts with bytes {} "
                  "(PNG starts with 89 50 4e 47, JPEG with ff d8 ff)",
                  origin, head));
}

Image decode_image(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  uint64_t size = fs::file_size(path, ec);
  FREIGHT_CHECK(!ec, fmt::format("image '{}': cannot read its size: {}", path, ec.message()));
  FREIGHT_CHECK(size <= kMaxImageFileBytes,
                fmt::format("image '{}' is {} bytes, more than the {} MiB Freight reads as one "
                            "image",
                            path, size, kMaxImageFileBytes >> 20));
  std::vector<uint8_t> bytes(size);
  std::ifstream f(path, std::ios::binary);
  FREIGHT_CHECK(f.good(), fmt::format("image '{}': cannot open it", path));
  f.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(size));
  FREIGHT_CHECK(uint64_t(f.gcount()) == size,
                fmt::format("image '{}': read {} of its {} bytes", path, f.gcount(), size));
  return decode_image(bytes, path);
}

}  // namespace freight::data
