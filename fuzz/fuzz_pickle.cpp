// libFuzzer target: the pickle VM (io/pickle.h) on arbitrary bytes, with hooks that build inert
// objects, so every opcode path runs without the torch allow-list.
#include <string_view>

#include "fuzz_util.h"
#include "io/pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace pk = lingbot::io::pickle;
  lingbot_fuzz::expect_only_lingbot_errors([&] {
    pk::Limits limits;
    limits.max_objects = 1 << 16;  // keep each input cheap; the limit path itself is exercised
    limits.max_stack = 1 << 14;
    pk::Unpickler vm(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.pkl",
        [](pk::Unpickler&, const pk::Object&, pk::Object*) -> pk::Object* { return nullptr; },
        [](pk::Unpickler& u, pk::Object*) -> pk::Object* { return u.make(pk::Kind::None); }, limits);
    vm.load();
  });
  return 0;
}
