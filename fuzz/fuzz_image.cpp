// libFuzzer target: image decoding (io/image.h decode_image: JPEG via libjpeg-turbo, PNG and BMP via
// stb_image, after our own header checks) and the EXIF orientation parser, on in-memory files.
#include "fuzz_util.h"
#include "io/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lingbot::io;
  const std::span<const uint8_t> file(data, size);
  (void)exif_orientation(file);
  lingbot_fuzz::expect_only_lingbot_errors([&] {
    // A valid image of many megapixels can come from a few kilobytes (a flat JPEG) and is only slow
    // under the sanitizers; the header probe still runs on it, and the size guard has unit tests.
    const ImageSize size = probe_image(file, "fuzz.img");
    if (int64_t{size.width} * size.height > (int64_t{1} << 22)) return;
    const ImageU8 img = decode_image(file, "fuzz.img");
    (void)apply_exif_orientation(img, exif_orientation(file));
  });
  return 0;
}
