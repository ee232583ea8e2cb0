#include <gtest/gtest.h>

#include <cstdint>

#include "core/format_bytes.h"

using lingbot::format_bytes;

TEST(FormatBytes, EachUnitFromItsFirstWholeUnitUp) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(3 * 1024 + 205), "3.2 KiB");
  EXPECT_EQ(format_bytes(int64_t{1} << 20), "1.0 MiB");
  EXPECT_EQ(format_bytes((int64_t{1} << 30) - 1), "1024.0 MiB");  // rounds up in MiB, never "1.00 GiB" of less
  EXPECT_EQ(format_bytes(int64_t{1} << 30), "1.00 GiB");
  EXPECT_EQ(format_bytes(int64_t{4757} << 20), "4.65 GiB");
  EXPECT_EQ(format_bytes(int64_t{27} << 40), "27648.00 GiB");
  EXPECT_EQ(format_bytes(-(int64_t{3} << 20)), "-3.0 MiB");  // a difference of two sizes
}
