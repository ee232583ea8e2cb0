// libFuzzer target: the PyTorch checkpoint loader (io/torch_checkpoint.h) on an in-memory file:
// the index (pickle only) and the full load (pickle + storages + views).
#include "fuzz_util.h"
#include "io/torch_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lingbot::io;
  lingbot_fuzz::expect_only_lingbot_errors(
      [&] { (void)index_torch_checkpoint(ByteSource::from_memory(lingbot_fuzz::bytes(data, size), "fuzz.pt")); });
  lingbot_fuzz::expect_only_lingbot_errors(
      [&] { (void)load_torch_checkpoint(ByteSource::from_memory(lingbot_fuzz::bytes(data, size), "fuzz.pt")); });
  return 0;
}
