// libFuzzer target: the safetensors reader (io/safetensors.h) on an in-memory file: header
// validation, then every tensor read (floats converted, integers widened).
#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lingbot::io;
  lingbot_fuzz::expect_only_lingbot_errors([&] {
    const SafetensorsReader r(ByteSource::from_memory(lingbot_fuzz::bytes(data, size), "fuzz.safetensors"));
    IntTensorMap ints;
    (void)r.read_all(std::nullopt, &ints);
  });
  return 0;
}
