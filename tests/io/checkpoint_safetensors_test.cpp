// safetensors reader/writer: golden files, round trips, integer tensors, and every header error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/safetensors.h"
#include "test_files.h"

namespace lingbot::io {
namespace {

using lingbot_test::kTinyDir;

std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("lingbot_st_" + std::to_string(::getpid()) + "_" + name)).string();
}

// A file made of an explicit header text and data bytes.
std::vector<uint8_t> raw_file(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return out;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    SafetensorsReader r(ByteSource::from_memory(bytes, "mem.safetensors"));
    r.read_all(std::nullopt, nullptr);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, ReadsGoldenTinyWeights) {
  const auto r = SafetensorsReader::open(kTinyDir + "/weights.safetensors");
  EXPECT_EQ(r.entries().size(), 258u);
  EXPECT_EQ(r.metadata().at("case"), "tiny");
  const auto& e = r.entry("aggregator.patch_embed.pos_embed");
  EXPECT_EQ(e.dtype, StorageDType::F16);
  EXPECT_EQ(e.shape, (Shape{1, 50, 128}));
  Tensor t = r.read("aggregator.patch_embed.pos_embed");
  EXPECT_EQ(t.dtype(), DType::F16);
  Tensor f = r.read("aggregator.patch_embed.pos_embed", DType::F32);
  ASSERT_EQ(f.dtype(), DType::F32);
  const auto* h = static_cast<const uint16_t*>(t.raw());
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(f.f32()[i], f16_to_f32(h[i])) << i;
  TensorMap all = r.read_all();
  EXPECT_EQ(total_numel(all), 1731628);
}

TEST(Safetensors, ReadsIntegerTraceTensors) {
  const auto r = SafetensorsReader::open(kTinyDir + "/reference.safetensors");
  const IntTensor idx = r.read_int("aggregated_frame_index");
  EXPECT_EQ(idx.dtype, StorageDType::I64);
  EXPECT_EQ(idx.shape, (Shape{10}));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(idx.values[i], i);
  const IntTensor kf = r.read_int("is_keyframe");
  EXPECT_EQ(kf.dtype, StorageDType::I32);
  for (int64_t v : kf.values) EXPECT_EQ(v, 1);
  EXPECT_THROW(r.read("is_keyframe"), Error);
  EXPECT_THROW(r.read_int("depth"), Error);
  EXPECT_THROW(r.read_all(), Error);  // integer tensors need an IntTensorMap
  IntTensorMap ints;
  TensorMap floats = r.read_all(std::nullopt, &ints);
  EXPECT_EQ(ints.size(), 7u);
  EXPECT_TRUE(floats.count("depth"));
}

TEST(Safetensors, RoundTripAllDtypes) {
  TensorMap m;
  m.emplace("a", Tensor::from_f32({2, 3}, std::vector<float>{1, -2, 3.5f, 0, 1e-3f, 65504}));
  m.emplace("b", m.at("a").to(DType::F16));
  m.emplace("c", m.at("a").to(DType::BF16));
  m.emplace("empty", Tensor(Shape{0, 4}));
  const std::string path = tmp_path("rt.safetensors");
  write_safetensors(path, m, std::nullopt, {{"k", "v"}});
  const auto r = SafetensorsReader::open(path);
  EXPECT_EQ(r.metadata().at("k"), "v");
  for (const auto& [name, t] : m) {
    Tensor back = r.read(name);
    ASSERT_EQ(back.dtype(), t.dtype()) << name;
    ASSERT_EQ(back.shape(), t.shape()) << name;
    EXPECT_EQ(std::memcmp(back.raw(), t.raw(), t.nbytes()), 0) << name;
  }
  // Converting writer: every tensor stored as bf16.
  write_safetensors(path, m, DType::BF16);
  const auto r2 = SafetensorsReader::open(path);
  for (const auto& e : r2.entries()) EXPECT_EQ(e.dtype, StorageDType::BF16) << e.name;
  Tensor c = r2.read("a");
  EXPECT_EQ(std::memcmp(c.raw(), m.at("c").raw(), c.nbytes()), 0);
  // Integer entries through the raw writer.
  const std::vector<int64_t> i64{5, -7, 1ll << 40};
  const std::vector<int32_t> i32{3, -4};
  const std::vector<uint8_t> b{1, 0, 1};
  const std::vector<double> f64{0.5, -2.25};
  const SafetensorsEntry entries[] = {{"i64", StorageDType::I64, {3}, i64.data()},
                                      {"i32", StorageDType::I32, {1, 2}, i32.data()},
                                      {"bool", StorageDType::Bool, {3}, b.data()},
                                      {"f64", StorageDType::F64, {2}, f64.data()}};
  write_safetensors(path, entries);
  const auto r3 = SafetensorsReader::open(path);
  EXPECT_EQ(r3.read_int("i64").values, i64);
  EXPECT_EQ(r3.read_int("i32").values, (std::vector<int64_t>{3, -4}));
  EXPECT_EQ(r3.read_int("bool").values, (std::vector<int64_t>{1, 0, 1}));
  Tensor d = r3.read("f64");
  EXPECT_EQ(d.dtype(), DType::F32);
  EXPECT_EQ(d.f32()[1], -2.25f);
  std::filesystem::remove(path);
}

TEST(Safetensors, HeaderIsPaddedTo8) {
  const std::string h = safetensors_header(std::vector<SafetensorsEntry>{{"x", StorageDType::F32, {1}, nullptr}}, {});
  EXPECT_EQ(h.size() % 8, 0u);
  EXPECT_EQ(h.front(), '{');
}

TEST(Safetensors, WriterRejectsDuplicateNames) {
  const float v = 1;
  const SafetensorsEntry e[] = {{"x", StorageDType::F32, {1}, &v}, {"x", StorageDType::F32, {1}, &v}};
  try {
    write_safetensors(tmp_path("dup.safetensors"), e);
    FAIL();
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(), "safetensors writer: duplicate tensor name 'x'");
  }
}

// A data range longer than the shape needs is refused (not read as the first numel values), and an
// empty tensor may sit anywhere, even inside another's range (it owns no bytes).
TEST(Safetensors, DataRangeMustMatchTheShapeExactlyAndEmptyTensorsOwnNoBytes) {
  const std::vector<uint8_t> d8(8, 0);
  EXPECT_EQ(error_of(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", d8)),
            "mem.safetensors: tensor 'a': 8 data bytes do not match shape [1] of F32 (1 x 4 bytes)");
  EXPECT_EQ(error_of(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", d8)),
            "");
}

TEST(Safetensors, HeaderErrors) {
  const std::vector<uint8_t> d8(8, 0);
  EXPECT_EQ(error_of({1, 2, 3}), "mem.safetensors: not a safetensors file (3 bytes, shorter than the 8-byte header length)");
  {
    std::vector<uint8_t> f = raw_file("{}", {});
    f[0] = 0xff;  // header length beyond the file
    EXPECT_EQ(error_of(f), "mem.safetensors: safetensors header length 255 exceeds the file size 10 (truncated or not a safetensors file)");
    f[7] = 0x7f;
    EXPECT_NE(error_of(f).find("exceeds the limit of"), std::string::npos);
  }
  EXPECT_EQ(error_of(raw_file("PK", {})),
            "mem.safetensors: safetensors header does not start with '{' (not a safetensors file): it begins 'PK'");
  EXPECT_NE(error_of(raw_file("{\"a\":", {})).find("safetensors header is not valid JSON"), std::string::npos);
  EXPECT_EQ(error_of(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8)),
            "mem.safetensors: safetensors header names tensor 'a' more than once");
  EXPECT_EQ(error_of(raw_file(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", d8)),
            "mem.safetensors: tensor 'a': unsupported dtype 'Q4' (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  EXPECT_EQ(error_of(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", d8)),
            "mem.safetensors: tensor 'a': data_offsets [0, 16] are outside the data block of 8 bytes (truncated or corrupt file)");
  EXPECT_EQ(error_of(raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8)),
            "mem.safetensors: tensor 'a': 8 data bytes do not match shape [3] of F32 (3 x 4 bytes)");
  EXPECT_EQ(error_of(raw_file(R"({"a":{"dtype":"F32","shape":[-3],"data_offsets":[0,8]}})", d8)),
            "mem.safetensors: tensor 'a' shape dimension must be a non-negative integer, got -3");
  EXPECT_EQ(error_of(raw_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,8]}})", d8)),
            "mem.safetensors: tensor 'a': shape [4611686018427387904, 4611686018427387904] has too many elements");
  EXPECT_EQ(error_of(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8)),
            "mem.safetensors: tensors 'a' and 'b' overlap in the data block");
  EXPECT_EQ(error_of(raw_file(R"({"a":{"dtype":"F32","shape":[2]}})", d8)),
            "mem.safetensors: tensor 'a': \"data_offsets\" must be an array [begin, end]");
  EXPECT_EQ(error_of(raw_file(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", {0, 7})),
            "mem.safetensors: tensor 'a' has integer dtype BOOL where float weights are expected");
  EXPECT_EQ(error_of(raw_file(R"({"__metadata__":{"x":1}})", {})), "mem.safetensors: __metadata__ entry 'x' is not a string");
  EXPECT_EQ(error_of(raw_file("[1,2]", {})),
            "mem.safetensors: safetensors header does not start with '{' (not a safetensors file): it begins '[1,2]'");
}

// Bytes of a corrupt header are echoed escaped and bounded: no control character (terminal escape
// sequences, newlines) or invalid UTF-8 reaches the one-line error, and a huge header is cut.
TEST(Safetensors, CorruptHeaderBytesAreEchoedEscapedAndBounded) {
  std::string garbage = "\x1b[31m\nBAD\xff";
  garbage += std::string(5000, 'A');
  std::string e = error_of(raw_file(garbage, {}));
  EXPECT_EQ(e, "mem.safetensors: safetensors header does not start with '{' (not a safetensors file): it begins "
               "'\\x1b[31m\\x0aBAD\\xff" + std::string(54, 'A') + "... (5010 bytes)'");
  // Valid JSON whose names and dtype carry control bytes.
  e = error_of(raw_file("{\"a\\u001b]0;x\\u0007\":{\"dtype\":\"\\n\\u001b[2J\",\"shape\":[1],\"data_offsets\":[0,4]}}", {0, 0, 0, 0}));
  EXPECT_EQ(e, "mem.safetensors: tensor 'a\\x1b]0;x\\x07': unsupported dtype '\\x0a\\x1b[2J' (supported: F64, F32, F16, BF16, "
               "I64, I32, I16, I8, U8, BOOL)");
  // Not JSON: the parser's quote of the input is escaped as well.
  e = error_of(raw_file("{\"a\": \x01\x1b[31m" + std::string(600, 'x'), {}));
  EXPECT_EQ(e.find('\x1b'), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_LT(e.size(), 400u) << e;
}

TEST(Safetensors, BoolValuesAreChecked) {
  SafetensorsReader r(ByteSource::from_memory(raw_file(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", {0, 7}), "m"));
  try {
    r.read_int("a");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "m: tensor 'a': bool element 1 has byte value 7 (expected 0 or 1)");
  }
}

TEST(Safetensors, MissingFileAndTensor) {
  EXPECT_THROW(SafetensorsReader::open("/nonexistent/x.safetensors"), Error);
  const auto r = SafetensorsReader::open(kTinyDir + "/weights.safetensors");
  try {
    r.read("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), kTinyDir + "/weights.safetensors: no tensor named 'nope'");
  }
}

}  // namespace
}  // namespace lingbot::io
