// libFuzzer target: the ZIP directory reader (io/zip_archive.h) on an in-memory file: directory,
// lookup and every entry's local header.
#include "fuzz_util.h"
#include "io/zip_archive.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto src = lingbot::io::ByteSource::from_memory(lingbot_fuzz::bytes(data, size), "fuzz.zip");
  lingbot_fuzz::expect_only_lingbot_errors([&] {
    (void)lingbot::io::looks_like_zip(*src);
    const lingbot::io::ZipDirectory zip(*src);
    for (const auto& e : zip.entries()) {
      (void)zip.find(e.name);
      lingbot_fuzz::expect_only_lingbot_errors([&] { (void)zip.data_offset(e); });
    }
  });
  return 0;
}
