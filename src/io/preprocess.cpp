// The resampler must round exactly like Pillow's, whose builds use no fused multiply-add.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "io/preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "core/error.h"

namespace lingbot::io {

long long round_half_even(double v) {
  // std::nearbyint rounds ties to even in the default rounding mode, as Python's round() does.
  return static_cast<long long>(std::nearbyint(v));
}

namespace {

// Pillow's bicubic kernel with a = -0.5, written in the same operation order so the doubles match.
double bicubic_kernel(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

constexpr int kPrecisionBits = 32 - 8 - 2;  // fixed-point weight bits of Pillow's 8-bit path

// Per output sample: first input index, tap count, and fixed-point weights (ksize per sample).
struct Coeffs {
  int ksize = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;
};

Coeffs precompute_coeffs(int in_size, int out_size) {
  constexpr double kSupport = 2.0;  // bicubic
  const float in0 = 0.0f, in1 = static_cast<float>(in_size);
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = kSupport * filterscale;
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.weights.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  const double inv_filterscale = 1.0 / filterscale;
  std::vector<double> k(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);  // truncation, as in Pillow
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = bicubic_kernel((x + xmin - center + 0.5) * inv_filterscale);
      k[x] = w;
      ww += w;
    }
    if (ww != 0.0) {
      for (int x = 0; x < xmax; ++x) k[x] /= ww;
    }
    for (int x = 0; x < xmax; ++x) {
      const double scaled = k[x] * (1 << kPrecisionBits);
      c.weights[static_cast<size_t>(xx) * c.ksize + x] =
          static_cast<int32_t>(k[x] < 0 ? -0.5 + scaled : 0.5 + scaled);
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

inline uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;  // arithmetic shift: floor, as Pillow's lookup index
  return static_cast<uint8_t>(std::clamp(v, 0, 255));
}

}  // namespace

ImageU8 resize_bicubic(const ImageU8& img, int out_width, int out_height) {
  LINGBOT_CHECK(out_width > 0 && out_height > 0, "resize target must be positive, got ", out_width,
                "x", out_height);
  LINGBOT_CHECK(img.width > 0 && img.height > 0 &&
                    img.rgb.size() == static_cast<size_t>(img.width) * img.height * 3,
                "resize input is not a valid RGB image (", img.width, "x", img.height, ")");
  const bool need_h = out_width != img.width;
  const bool need_v = out_height != img.height;
  if (!need_h && !need_v) {
    ImageU8 copy;
    copy.width = img.width;
    copy.height = img.height;
    copy.rgb = img.rgb;
    return copy;
  }
  Coeffs vert = precompute_coeffs(img.height, out_height);
  // Rows of the source the vertical pass reads; the horizontal pass only produces those.
  const int y_first = vert.first.front();
  const int y_last = vert.first.back() + vert.count.back();

  ImageU8 tmp;
  const ImageU8* src = &img;
  if (need_h) {
    const Coeffs hor = precompute_coeffs(img.width, out_width);
    for (int& f : vert.first) f -= y_first;
    tmp = ImageU8(out_width, y_last - y_first);
    for (int yy = 0; yy < tmp.height; ++yy) {
      const uint8_t* line = img.pixel(0, yy + y_first);
      uint8_t* out = tmp.pixel(0, yy);
      for (int xx = 0; xx < out_width; ++xx) {
        const int32_t* k = hor.weights.data() + static_cast<size_t>(xx) * hor.ksize;
        const uint8_t* p = line + static_cast<size_t>(hor.first[xx]) * 3;
        int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
        for (int x = 0; x < hor.count[xx]; ++x) {
          s0 += p[x * 3 + 0] * k[x];
          s1 += p[x * 3 + 1] * k[x];
          s2 += p[x * 3 + 2] * k[x];
        }
        out[xx * 3 + 0] = clip8(s0);
        out[xx * 3 + 1] = clip8(s1);
        out[xx * 3 + 2] = clip8(s2);
      }
    }
    src = &tmp;
  }
  if (!need_v) return tmp;

  ImageU8 out(src->width, out_height);
  const size_t stride = static_cast<size_t>(src->width) * 3;
  for (int yy = 0; yy < out_height; ++yy) {
    const int32_t* k = vert.weights.data() + static_cast<size_t>(yy) * vert.ksize;
    const uint8_t* base = src->pixel(0, vert.first[yy]);
    uint8_t* o = out.pixel(0, yy);
    for (size_t xc = 0; xc < stride; ++xc) {
      int32_t s = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < vert.count[yy]; ++y) s += base[y * stride + xc] * k[y];
      o[xc] = clip8(s);
    }
  }
  return out;
}

ImageSize resized_size(ImageSize in, const PreprocessOptions& opt) {
  check_preprocess_options(opt);
  LINGBOT_CHECK(in.width > 0 && in.height > 0, "image size must be positive, got ", in.width, "x",
                in.height);
  const int ts = opt.image_size;
  // Same expression order as upstream: side * (target / other) / patch, then round half to even.
  auto scaled = [&](int side, int ref) {
    const double ratio = static_cast<double>(ts) / static_cast<double>(ref);
    return static_cast<int>(round_half_even(static_cast<double>(side) * ratio / opt.patch_size) *
                            opt.patch_size);
  };
  ImageSize out;
  if (opt.preprocess == Preprocess::Pad && in.width < in.height) {
    out = {scaled(in.width, in.height), ts};
  } else {
    out = {ts, scaled(in.height, in.width)};
  }
  // Labelled, as every size in a message: a Python user thinks in array shapes (HxW).
  LINGBOT_CHECK(out.width > 0 && out.height > 0, "image of ", in.height, "x", in.width,
                " (HxW) is too elongated for image_size ", ts, " (a side would be resized to 0 pixels)");
  return out;
}

ImageSize preprocessed_size(ImageSize in, const PreprocessOptions& opt) {
  const ImageSize r = resized_size(in, opt);
  if (opt.preprocess == Preprocess::Pad) {
    // Upstream pads (a negative amount crops) only when a side is short of image_size.
    if (r.width < opt.image_size || r.height < opt.image_size) return {opt.image_size, opt.image_size};
    return r;
  }
  return {r.width, std::min(r.height, opt.image_size)};
}

ImageSize batch_canvas_size(std::span<const ImageSize> sizes) {
  LINGBOT_CHECK(!sizes.empty(), "at least 1 image is required");
  ImageSize c{0, 0};
  for (const ImageSize& s : sizes) {
    c.width = std::max(c.width, s.width);
    c.height = std::max(c.height, s.height);
  }
  return c;
}

std::string mixed_sizes_notice(std::span<const ImageSize> sizes) {
  std::map<std::pair<int, int>, int64_t> counts;  // (width, height) -> frames
  for (const ImageSize& z : sizes) ++counts[{z.width, z.height}];
  if (counts.size() < 2) return "";
  const ImageSize canvas = batch_canvas_size(sizes);
  std::string list;
  for (const auto& [size, n] : counts) list += detail::concat(list.empty() ? "" : ", ", n, " at ", size.first, "x", size.second);
  return detail::concat("the frames preprocess to ", counts.size(), " sizes (WxH: ", list, "): each is centred on a ", canvas.width,
                        "x", canvas.height, " canvas padded with white, as upstream batches mixed sizes; the padding "
                        "shows no scene (frames of one size and orientation avoid it)");
}

namespace {

int floor_half(int v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }  // Python v // 2

// Float CHW planes with a size; the working form between crop and pad steps.
struct Planes {
  int width = 0, height = 0;
  std::vector<float> data;  // [3, height, width]
};

// Where a w x h image centred on a W x H canvas starts: top = (H - h) // 2 (floor, so a negative
// padding crops, as torch.nn.functional.pad does), and likewise left.
struct Offset {
  int left = 0, top = 0;
};
Offset centred_offset(int w, int h, int canvas_w, int canvas_h) {
  return {floor_half(canvas_w - w), floor_half(canvas_h - h)};
}

// Centres `src` on a white (1.0) canvas of w x h (centred_offset).
Planes place_centred(const Planes& src, int w, int h) {
  Planes out{w, h, std::vector<float>(static_cast<size_t>(3) * w * h, 1.0f)};
  const auto [left, top] = centred_offset(src.width, src.height, w, h);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < src.height; ++y) {
      const int dy = y + top;
      if (dy < 0 || dy >= h) continue;
      for (int x = 0; x < src.width; ++x) {
        const int dx = x + left;
        if (dx < 0 || dx >= w) continue;
        out.data[(static_cast<size_t>(c) * h + dy) * w + dx] =
            src.data[(static_cast<size_t>(c) * src.height + y) * src.width + x];
      }
    }
  }
  return out;
}

}  // namespace

Tensor preprocess_image(const ImageU8& img, const PreprocessOptions& opt, ImageSize canvas) {
  const ImageSize rs = resized_size({img.width, img.height}, opt);
  const ImageU8 resized = resize_bicubic(img, rs.width, rs.height);

  // Crop mode keeps the centre image_size rows when the resized image is taller.
  int row0 = 0, rows = rs.height;
  if (opt.preprocess == Preprocess::Crop && rs.height > opt.image_size) {
    row0 = (rs.height - opt.image_size) / 2;
    rows = opt.image_size;
  }
  Planes p{rs.width, rows, std::vector<float>(static_cast<size_t>(3) * rs.width * rows)};
  for (int y = 0; y < rows; ++y) {
    for (int x = 0; x < rs.width; ++x) {
      const uint8_t* px = resized.pixel(x, y + row0);
      for (int c = 0; c < 3; ++c) {
        p.data[(static_cast<size_t>(c) * rows + y) * rs.width + x] = static_cast<float>(px[c]) / 255.0f;
      }
    }
  }
  if (opt.preprocess == Preprocess::Pad && (p.width < opt.image_size || p.height < opt.image_size)) {
    p = place_centred(p, opt.image_size, opt.image_size);
  }
  if (canvas.width > 0 && canvas.height > 0 &&
      (canvas.width != p.width || canvas.height != p.height)) {
    LINGBOT_CHECK(canvas.width >= p.width && canvas.height >= p.height, "a ", img.width, "x", img.height,
                  " (WxH) frame preprocesses to ", p.width, "x", p.height, ", larger than the ", canvas.width, "x",
                  canvas.height, " canvas the sequence was sized to (from its frames' sizes, or a video's stated "
                  "size): a video whose resolution changes mid-stream is not supported (split it where it changes)");
    p = place_centred(p, canvas.width, canvas.height);
  }
  Tensor t(Shape{3, p.height, p.width});
  std::memcpy(t.f32(), p.data.data(), p.data.size() * sizeof(float));
  return t;
}

FramePlacement place_on_frame(ImageSize in, const PreprocessOptions& opt, ImageSize canvas) {
  FramePlacement r{{in, resized_size(in, opt), 0, 0}, {}};
  SourcePlacement& p = r.source;
  int w = p.resized.width, h = p.resized.height;
  r.content = {0, 0, w, h};
  if (opt.preprocess == Preprocess::Crop && h > opt.image_size) {
    p.top = -((h - opt.image_size) / 2);
    h = r.content.height = opt.image_size;
  }
  const auto centre_on = [&](int canvas_w, int canvas_h) {
    const auto [left, top] = centred_offset(w, h, canvas_w, canvas_h);
    p.left += left;
    p.top += top;
    // Clipped to the canvas (only a canvas smaller than the frame, which preprocess_image refuses, clips).
    PixelRect& c = r.content;
    const int x0 = std::max(c.x + left, 0), y0 = std::max(c.y + top, 0);
    const int x1 = std::min(c.x + left + c.width, canvas_w), y1 = std::min(c.y + top + c.height, canvas_h);
    c = {x0, y0, std::max(x1 - x0, 0), std::max(y1 - y0, 0)};
    w = canvas_w;
    h = canvas_h;
  };
  if (opt.preprocess == Preprocess::Pad && (w < opt.image_size || h < opt.image_size))
    centre_on(opt.image_size, opt.image_size);
  if (canvas.width > 0 && canvas.height > 0 && (canvas.width != w || canvas.height != h))
    centre_on(canvas.width, canvas.height);
  return r;
}

PixelRect content_rect(ImageSize in, const PreprocessOptions& opt, ImageSize canvas) {
  return place_on_frame(in, opt, canvas).content;
}

std::array<double, 9> source_intrinsics(const std::array<double, 9>& K, const SourcePlacement& p) {
  LINGBOT_CHECK(p.source.width > 0 && p.source.height > 0 && p.resized.width > 0 && p.resized.height > 0,
                "source_intrinsics: sizes must be positive, got source ", p.source.width, "x", p.source.height,
                ", resized ", p.resized.width, "x", p.resized.height);
  const double sx = static_cast<double>(p.resized.width) / p.source.width;
  const double sy = static_cast<double>(p.resized.height) / p.source.height;
  // x0 = x / sx + a with a = (0.5 - left) / sx - 0.5, x = row0·X / row2·X: row0' = row0 / sx + a row2.
  const double ax = (0.5 - p.left) / sx - 0.5, ay = (0.5 - p.top) / sy - 0.5;
  std::array<double, 9> out = K;
  for (int c = 0; c < 3; ++c) {
    out[c] = K[c] / sx + ax * K[6 + c];
    out[3 + c] = K[3 + c] / sy + ay * K[6 + c];
  }
  return out;
}

Tensor preprocess_images(std::span<const ImageU8> images, const PreprocessOptions& opt) {
  LINGBOT_CHECK(!images.empty(), "at least 1 image is required");
  std::vector<ImageSize> sizes;
  sizes.reserve(images.size());
  for (const ImageU8& im : images) sizes.push_back(preprocessed_size({im.width, im.height}, opt));
  const ImageSize canvas = batch_canvas_size(sizes);
  Tensor out(Shape{static_cast<int64_t>(images.size()), 3, canvas.height, canvas.width});
  const size_t per = static_cast<size_t>(3) * canvas.height * canvas.width;
  for (size_t i = 0; i < images.size(); ++i) {
    const Tensor one = preprocess_image(images[i], opt, canvas);
    std::memcpy(out.f32() + i * per, one.f32(), per * sizeof(float));
  }
  return out;
}

}  // namespace lingbot::io

namespace lingbot {

std::string_view preprocess_name(Preprocess p) { return p == Preprocess::Pad ? "pad" : "crop"; }

Preprocess parse_preprocess(std::string_view name) {
  if (name == "crop") return Preprocess::Crop;
  if (name == "pad") return Preprocess::Pad;
  throw Error(detail::concat("unknown preprocess '", name, "' (expected crop or pad)"));
}

void check_preprocess_options(const PreprocessOptions& o) {
  LINGBOT_CHECK(o.image_size > 0, "image_size must be positive, got ", o.image_size);
  LINGBOT_CHECK(o.image_size <= kMaxImageSize, "image_size must be in 1..", kMaxImageSize, ", got ", o.image_size);
  LINGBOT_CHECK(o.patch_size > 0 && o.patch_size <= kMaxImageSize, "patch_size must be in 1..", kMaxImageSize, ", got ",
                o.patch_size);
  LINGBOT_CHECK(o.image_size % o.patch_size == 0, "image_size must be a multiple of the model's patch size ",
                o.patch_size, ", got ", o.image_size);
  LINGBOT_CHECK(o.preprocess == Preprocess::Crop || o.preprocess == Preprocess::Pad, "preprocess must be Crop or Pad, got ",
                static_cast<int>(o.preprocess));
}

Tensor preprocess_image(const uint8_t* rgb, int width, int height, const PreprocessOptions& options) {
  check_preprocess_options(options);
  LINGBOT_CHECK(rgb != nullptr, "preprocess_image: rgb is null");
  LINGBOT_CHECK(width > 0 && height > 0, "preprocess_image: image size must be positive, got ", width, "x", height);
  LINGBOT_CHECK(static_cast<int64_t>(width) * height <= io::kMaxImagePixels, "preprocess_image: ", width, "x", height,
                " is more than ", io::kMaxImagePixels, " pixels");
  io::ImageU8 img;
  img.width = width;
  img.height = height;
  img.rgb.assign(rgb, rgb + static_cast<size_t>(width) * height * 3);
  return io::preprocess_image(img, options);
}

Tensor load_frame(const std::filesystem::path& image_file, const PreprocessOptions& options, CorruptData* corrupt) {
  check_preprocess_options(options);  // before reading a file the options would refuse
  return io::preprocess_image(io::load_image(image_file, corrupt), options);
}

}  // namespace lingbot
