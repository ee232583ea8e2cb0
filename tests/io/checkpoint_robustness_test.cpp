// Damaged checkpoints: truncation, wrong magic, corrupt pickles, bad storages and dtypes each give a
// clear lingbot::Error; and a bounded mutation fuzz (thousands of in-memory mutants of the .pt and
// .safetensors test files) that must only ever produce lingbot::Error or a successful load. Run it
// under the ASan+UBSan build (-DLINGBOT_SANITIZE=ON) to prove the absence of memory errors.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/torch_checkpoint.h"
#include "io/zip_archive.h"
#include "test_files.h"

namespace lingbot::io {
namespace {

using lingbot_test::kTestdata;
using lingbot_test::slurp_bytes;


// "" on success, the message of a lingbot::Error otherwise; any other exception fails the test.
std::string load_error(std::vector<uint8_t> bytes, bool index_only = false) {
  try {
    auto src = ByteSource::from_memory(std::move(bytes), "f");
    if (index_only) {
      if (sniff_checkpoint_format(*src) == CheckpointFormat::Torch) index_torch_checkpoint(std::move(src));
      else SafetensorsReader r(std::move(src));
    } else {
      load_checkpoint(std::move(src));
    }
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-lingbot exception: " << e.what();
    return e.what();
  }
  return "";
}

uint32_t u32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }

// Where data.pkl's bytes and its central-directory CRC field sit, so mutants of the pickle can carry a
// valid CRC and reach the pickle VM.
struct PickleSpan {
  size_t begin = 0, size = 0, crc_field = 0;
};
PickleSpan find_pickle(const std::vector<uint8_t>& f) {
  auto src = ByteSource::from_memory(f, "f");
  ZipDirectory zip(*src);
  for (const auto& e : zip.entries()) {
    if (e.name.size() > 9 && e.name.compare(e.name.size() - 9, 9, "/data.pkl") == 0) {
      PickleSpan s{static_cast<size_t>(zip.data_offset(e)), static_cast<size_t>(e.size), 0};
      for (size_t p = 0; p + 46 <= f.size(); ++p) {  // its central-directory record
        if (u32(&f[p]) == 0x02014b50 && u32(&f[p + 42]) == e.local_header_offset) s.crc_field = p + 16;
      }
      return s;
    }
  }
  ADD_FAILURE() << "no data.pkl";
  return {};
}

void fix_crc(std::vector<uint8_t>& f, const PickleSpan& s) {
  const uint32_t crc = crc32(f.data() + s.begin, s.size);
  std::memcpy(&f[s.crc_field], &crc, 4);
}

// A '{' at byte 8 after an implausible header length is not taken for safetensors.
TEST(CheckpointRobustness, AHugeHeaderLengthIsNotSafetensors) {
  std::vector<uint8_t> f(16, 0xff);
  f[8] = '{';
  EXPECT_EQ(load_error(f), "f: unrecognised checkpoint format (neither a PyTorch zip checkpoint nor safetensors)");
}

TEST(CheckpointRobustness, TruncatedFilesFailCleanly) {
  for (const char* name : {"/tiny/model.pt", "/torch/views.pt", "/tiny/weights.safetensors"}) {
    const std::vector<uint8_t> f = slurp_bytes(kTestdata + name);
    for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{30}, f.size() / 3, f.size() / 2, f.size() - 23, f.size() - 1}) {
      const std::string msg = load_error(std::vector<uint8_t>(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(cut)));
      EXPECT_FALSE(msg.empty()) << name << " cut at " << cut;
    }
  }
  const std::vector<uint8_t> pt = slurp_bytes(kTestdata + "/tiny/model.pt");
  EXPECT_EQ(load_error(std::vector<uint8_t>(pt.begin(), pt.begin() + 1000)),
            "f: no zip end-of-central-directory record (truncated, or not a zip archive)");
  const std::vector<uint8_t> st = slurp_bytes(kTestdata + "/tiny/weights.safetensors");
  EXPECT_EQ(load_error(std::vector<uint8_t>(st.begin(), st.end() - 2)),
            "f: tensor 'depth_head.scratch.output_conv2.2.bias': data_offsets [3463252, 3463256] are outside the data "
            "block of 3463254 bytes (truncated or corrupt file)");
}

TEST(CheckpointRobustness, WrongMagic) {
  std::vector<uint8_t> pt = slurp_bytes(kTestdata + "/tiny/model.pt");
  pt[0] = 'Q';
  EXPECT_EQ(load_error(pt), "f: unrecognised checkpoint format (neither a PyTorch zip checkpoint nor safetensors)");
  std::vector<uint8_t> st = slurp_bytes(kTestdata + "/tiny/weights.safetensors");
  st[8] = '[';
  EXPECT_EQ(load_error(st), "f: unrecognised checkpoint format (neither a PyTorch zip checkpoint nor safetensors)");
  EXPECT_EQ(load_error(slurp_bytes(kTestdata + "/torch/legacy.pt")),
            "f: legacy (pre-1.6, non-zip) PyTorch checkpoint format is not supported; re-save it with a current torch.save "
            "or convert it to safetensors");
}

TEST(CheckpointRobustness, CorruptPickle) {
  std::vector<uint8_t> pt = slurp_bytes(kTestdata + "/torch/views.pt");
  const PickleSpan s = find_pickle(pt);
  std::vector<uint8_t> crc_bad = pt;
  crc_bad[s.begin + 10] ^= 0x55;
  EXPECT_EQ(load_error(crc_bad), "f: views/data.pkl fails its CRC-32 check (corrupt)");
  std::vector<uint8_t> stop = pt;
  stop[s.begin + s.size - 1] = 0xff;  // STOP -> invalid opcode
  fix_crc(stop, s);
  EXPECT_EQ(load_error(stop), "f (views/data.pkl): corrupt pickle stream: unsupported opcode 0xff at byte " +
                                  std::to_string(s.size - 1));
}

TEST(CheckpointRobustness, BadStoragesAndDtypes) {
  const std::string t = kTestdata + "/torch/";
  EXPECT_EQ(load_error(slurp_bytes(t + "complex_storage.pt")),
            "f (a/data.pkl): corrupt pickle stream: unsupported storage type 'torch.ComplexFloatStorage' at byte 116");
  EXPECT_EQ(load_error(slurp_bytes(t + "storage_too_small.pt")), "f: storage '0' declares 1000 elements of 4 bytes but its entry holds 8 bytes");
  EXPECT_NE(load_error(slurp_bytes(t + "view_out_of_range.pt")).find("reaches element 3 of storage '0' with 3 elements"), std::string::npos);
  EXPECT_EQ(load_error(slurp_bytes(t + "duplicate_key.pt")), "f: state dict key 'w' appears more than once");
  EXPECT_EQ(load_error(slurp_bytes(t + "expansion_bomb.pt")),
            "f: tensors declare more than 2147483648 bytes, over 4x the file size (634 bytes); refusing to load");
}

// ---- bounded mutation fuzz ----

std::vector<uint8_t> mutate(std::vector<uint8_t> f, std::mt19937& rng, size_t lo, size_t hi) {
  static const uint8_t interesting[] = {0x00, 0xff, 0x7f, 0x80, 0x01, '(', ')', 't', '.', 'R', 'Q', 'h', 'q', 'X', 'K', ']', '}', 'u', 'b', '0', '9', '"', ',', '-'};
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n; ++k) {
    const size_t pos = lo + rng() % (hi - lo);
    switch (rng() % 4) {
      case 0: f[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
      case 1: f[pos] = interesting[rng() % sizeof(interesting)]; break;
      case 2: f[pos] = static_cast<uint8_t>(rng()); break;
      default: {  // overwrite a short run with bytes copied from elsewhere in the region
        const size_t from = lo + rng() % (hi - lo);
        const size_t len = std::min<size_t>({1 + rng() % 8, hi - pos, hi - from});
        std::memmove(&f[pos], &f[from], len);
      }
    }
  }
  return f;
}

TEST(CheckpointFuzz, TorchWholeFileMutants) {
  const std::vector<uint8_t> base = slurp_bytes(kTestdata + "/torch/views.pt");
  std::mt19937 rng(1);
  int ok = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> m = mutate(base, rng, 0, base.size());
    if (rng() % 8 == 0) m.resize(rng() % m.size());
    ok += load_error(std::move(m)).empty();
  }
  EXPECT_GT(ok, 0);  // mutations of tensor data still load
}

TEST(CheckpointFuzz, TorchPickleMutantsWithValidCrc) {
  const std::vector<uint8_t> base = slurp_bytes(kTestdata + "/torch/views.pt");
  const PickleSpan s = find_pickle(base);
  std::mt19937 rng(2);
  int errors = 0;
  for (int i = 0; i < 4000; ++i) {
    std::vector<uint8_t> m = mutate(base, rng, s.begin, s.begin + s.size);
    fix_crc(m, s);
    errors += !load_error(std::move(m)).empty();
  }
  EXPECT_GT(errors, 1000);  // the VM really saw broken streams
}

TEST(CheckpointFuzz, GoldenTorchIndexMutants) {
  // The real 258-tensor checkpoint: mutate its zip directory and pickle (CRC fixed), index only.
  const std::vector<uint8_t> base = slurp_bytes(kTestdata + "/tiny/model.pt");
  const PickleSpan s = find_pickle(base);
  std::mt19937 rng(3);
  for (int i = 0; i < 100; ++i) {
    std::vector<uint8_t> m = mutate(base, rng, s.begin, s.begin + s.size);
    fix_crc(m, s);
    load_error(std::move(m), true);
    load_error(mutate(base, rng, base.size() - 40000, base.size()), true);  // central directory + EOCD
  }
}

TEST(CheckpointFuzz, SafetensorsMutants) {
  // A small file with every dtype, and the golden weights' header.
  std::vector<float> f32(24, 1.5f);
  std::vector<int64_t> i64(5, -3);
  std::vector<uint8_t> b(3, 1);
  std::vector<uint16_t> h(6, 0x3c00);
  const SafetensorsEntry e[] = {{"a", StorageDType::F32, {2, 3, 4}, f32.data()}, {"i", StorageDType::I64, {5}, i64.data()},
                                {"m", StorageDType::Bool, {3}, b.data()},        {"h", StorageDType::F16, {3, 2}, h.data()},
                                {"z", StorageDType::BF16, {0, 7}, h.data()}};
  const std::string path = ::testing::TempDir() + "/fuzz_base.safetensors";
  write_safetensors(path, e, {{"k", "v"}});
  const std::vector<uint8_t> small = slurp_bytes(path);
  std::mt19937 rng(4);
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> m = mutate(small, rng, 0, small.size());
    if (rng() % 8 == 0) m.resize(rng() % m.size());
    load_error(std::move(m));
  }
  const std::vector<uint8_t> golden = slurp_bytes(kTestdata + "/tiny/weights.safetensors");
  uint64_t header = 0;
  std::memcpy(&header, golden.data(), 8);
  for (int i = 0; i < 300; ++i) load_error(mutate(golden, rng, 0, 8 + header), true);
}

}  // namespace
}  // namespace lingbot::io
