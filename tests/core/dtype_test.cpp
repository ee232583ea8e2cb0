#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/error.h"
#include "lingbot/dtype.h"
#include "lingbot/tensor.h"

using namespace lingbot;

TEST(DType, F16RoundTripIsExactForEveryHalf) {
  // Every finite half value converts to float and back unchanged.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    const bool is_nan = ((x & 0x7c00) == 0x7c00) && (x & 0x3ff);
    if (is_nan) continue;
    EXPECT_EQ(f32_to_f16(f16_to_f32(x)), x) << std::hex << h;
  }
}

TEST(DType, F16RoundsToNearestEven) {
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 1.0f / 2048)), 1.0f);            // tie -> even (down)
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie -> even (up)
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, F16MatchesNearestRepresentableOnRandomFloats) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-70000.f, 70000.f);
  for (int i = 0; i < 20000; ++i) {
    const float f = u(rng) * (i % 3 == 0 ? 1e-6f : 1.f);
    const float r = f16_to_f32(f32_to_f16(f));
    if (std::isinf(r)) continue;
    // Relative error of round-to-nearest in half is at most 2^-11 (normal range).
    if (std::fabs(f) > 6.2e-5f) {
      EXPECT_LE(std::fabs(r - f), std::fabs(f) * 4.9e-4f) << f;
    }
  }
}

TEST(DType, BF16RoundTrip) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
  const float f = 1.0f + 1.0f / 256;  // exactly between two bf16 values -> even (1.0)
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(f)), 1.0f);
}

TEST(DType, ParseNamesAndRejectsUnknown) {
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  try {
    parse_dtype("f8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown dtype 'f8' (expected f32, f16 or bf16)");
  }
}

TEST(Tensor, ReshapeAndShapeChecks) {
  Tensor t({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  t.reshape({-1, 4});
  EXPECT_EQ(t.shape(), (Shape{6, 4}));
  EXPECT_THROW(t.reshape({5, 5}), Error);
  try {
    t.check_shape({6, 5}, "weight x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "weight x: expected shape [6, 5], got [6, 4]");
  }
  Tensor h = t.to(DType::F16);
  EXPECT_THROW(h.f32(), Error);
}

// A moved-from tensor is empty, never a shape without data (clone() of one copied from null).
TEST(Tensor, MovedFromTensorIsEmpty) {
  Tensor a = Tensor::from_f32({3, 4}, std::vector<float>(12, 1.5f));
  Tensor b(std::move(a));
  EXPECT_EQ(b.numel(), 12);
  EXPECT_EQ(b.f32()[11], 1.5f);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is what is tested
  EXPECT_EQ(a.numel(), 0);
  EXPECT_EQ(a.nbytes(), 0u);
  EXPECT_EQ(a.shape(), Shape{});
  EXPECT_TRUE(a.clone().empty());
  EXPECT_TRUE(a.to(DType::BF16).empty());
  Tensor c({2});
  c = std::move(b);
  EXPECT_EQ(c.shape(), (Shape{3, 4}));
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.nbytes(), 0u);
}

TEST(Tensor, ImpossibleShapesAndDtypesAreRefused) {
  try {
    Tensor t({(int64_t{1} << 62) + 1, 4});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "shape [4611686018427387905, 4] has more elements than an int64 counts");
  }
  try {
    Tensor t({int64_t{1} << 61});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tensor [2305843009213693952] is too large to allocate");
  }
  try {
    Tensor t({2}, static_cast<DType>(9));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown dtype 9");
  }
  Tensor f({2});
  EXPECT_THROW(f.to(static_cast<DType>(9)), Error);
}
