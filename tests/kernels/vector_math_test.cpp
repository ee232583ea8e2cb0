// vecmath::gelu_erf (libmvec's vector erff where the CPU has AVX2 / AVX-512) against the definition
// in double: within 4 f32 ulps of the erf term, for every tail length, leaving memory past n untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vector_math.h"

namespace lingbot::kernels {
namespace {

double gelu_ref(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }

TEST(VectorMath, GeluMatchesTheDefinitionEverywhere) {
  std::cout << "gelu variant: " << vecmath::gelu_variant() << "\n";
  std::vector<float> x;
  for (double v = -12.0; v <= 12.0; v += 1.0 / 512) x.push_back(static_cast<float>(v));
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, 80.0f, -80.0f, 1e20f, -1e20f}) x.push_back(v);
  const std::vector<float> in = x;
  vecmath::gelu_erf(x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = in[i], ref = gelu_ref(v);
    // The erf term is within 4 ulps of 1 (2.4e-7 absolute), times 0.5·|v|; plus rounding of the products.
    ASSERT_NEAR(x[i], ref, 2.4e-7 * 0.5 * std::abs(v) + 1.2e-7 * std::abs(ref) + 1e-38) << "v = " << v;
  }
}

TEST(VectorMath, GeluEveryTailLengthAndNothingPastTheEnd) {
  for (int64_t n = 0; n <= 40; ++n) {
    std::vector<float> x(static_cast<size_t>(n) + 8, 7.0f);
    for (int64_t i = 0; i < n; ++i) x[i] = 0.25f * static_cast<float>(i) - 3.0f;
    std::vector<float> whole(x.begin(), x.begin() + n);
    vecmath::gelu_erf(x.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(x[i], gelu_ref(0.25 * static_cast<double>(i) - 3.0), 1e-6) << "n " << n << " i " << i;
    for (size_t i = static_cast<size_t>(n); i < x.size(); ++i) ASSERT_EQ(x[i], 7.0f) << "n " << n;
    // The same element gives the same result whether it is in a full vector or in the tail.
    if (n > 0) {
      std::vector<float> one{whole.back()};
      vecmath::gelu_erf(one.data(), 1);
      ASSERT_EQ(one[0], x[static_cast<size_t>(n - 1)]) << "n " << n;
    }
  }
}

TEST(VectorMath, GeluKernelIsThreadInvariant) {
  std::vector<float> a(100003), b;
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.001f * static_cast<float>(i)) * 6.0f;
  b = a;
  gelu_erf(a.data(), static_cast<int64_t>(a.size()), 1);
  gelu_erf(b.data(), static_cast<int64_t>(b.size()), 3);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace lingbot::kernels
