#include "kernels/cpu/patch_embed.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/ops.h"

namespace lingbot::kernels {

void patchify(const float* image, int64_t channels, int64_t H, int64_t W, int64_t k, float* cols, int num_threads) {
  LINGBOT_CHECK(k > 0 && H % k == 0 && W % k == 0, "patchify: image ", H, "x", W, " is not a multiple of patch size ",
                k);
  const int64_t gh = H / k, gw = W / k, row = channels * k * k;
  const int64_t patches = gh * gw;
#pragma omp parallel for schedule(static) num_threads(std::max(1, num_threads)) if (patches > 1 && num_threads > 1)
  for (int64_t p = 0; p < patches; ++p) {
    const int64_t py = p / gw, px = p % gw;
    float* dst = cols + p * row;
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t ky = 0; ky < k; ++ky)
        std::memcpy(dst + (c * k + ky) * k, image + (c * H + py * k + ky) * W + px * k,
                    static_cast<size_t>(k) * sizeof(float));
  }
}

void patch_embed(const float* image, int64_t channels, int64_t H, int64_t W, int64_t k, const float* weight,
                 const float* bias, int64_t out_channels, float* cols, float* out, int num_threads) {
  patchify(image, channels, H, W, k, cols, num_threads);
  linear(cols, (H / k) * (W / k), channels * k * k, weight, bias, out_channels, out, num_threads);
}

}  // namespace lingbot::kernels
