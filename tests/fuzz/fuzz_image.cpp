// libFuzzer target: PNG and JPEG decoding (libpng and libjpeg-turbo behind Freight's setjmp
// frames) on arbitrary bytes, then the channel conversion and a resize of what decoded.
#include "freight/data/image.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  freight::fuzz::expect_clean([&] {
    freight::data::Image im = freight::data::decode_image({data, size}, "fuzz input");
    im = freight::data::convert_channels(im, im.channels == 1 ? 3 : 1);
    // Small targets only: the decoded size is bounded by the decoder, the resize's by these.
    im = freight::data::resize_image(im, 1 + int64_t(size % 7), 1 + int64_t(size % 5));
    (void)im;
  });
  return 0;
}
