#include "model/dpt_head.h"

#include <algorithm>
#include <cmath>

#include "model/take_weight.h"

namespace lingbot::model {

namespace {

// torch.linspace(start, end, steps, dtype=float32): endpoints rounded to float, float step, the
// second half counted back from the end.
std::vector<float> linspace_f32(double start_d, double end_d, int64_t steps) {
  std::vector<float> v(static_cast<size_t>(steps));
  const float start = static_cast<float>(start_d), end = static_cast<float>(end_d);
  if (steps == 1) {
    v[0] = start;
    return v;
  }
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  for (int64_t i = 0; i < steps; ++i)
    v[i] = i < halfway ? start + step * static_cast<float>(i) : end - step * static_cast<float>(steps - i - 1);
  return v;
}

using compute::Array;

compute::MapView map(const Array& a) { return {a.data(), a.dim(0), a.dim(1), a.dim(2)}; }

Array clone(compute::Backend& be, const Array& x) {
  Array y(be, x.shape());
  const auto bytes = static_cast<int64_t>(sizeof(float)) * x.numel();
  be.copy_rows(y.data(), bytes, x.data(), bytes, 1, bytes);
  return y;
}

void relu_inplace(compute::Backend& be, Array& t) { be.relu(t.data(), t.numel()); }

void add_into(compute::Backend& be, Array& y, const Array& x) { be.add(y.data(), x.data(), y.numel()); }

// conv2d / conv_transpose2d / bilinear resize into a new array of the output's shape.
Array conv(compute::Backend& be, const Array& x, const Tensor& w, const Tensor* b, compute::ConvParams p) {
  Array y(be, {w.dim(0), compute::conv2d_out_size(x.dim(1), w.dim(2), p), compute::conv2d_out_size(x.dim(2), w.dim(3), p)});
  be.conv2d(map(x), w, b, p, y.data());
  return y;
}

Array conv_t(compute::Backend& be, const Array& x, const Tensor& w, const Tensor* b, compute::ConvParams p) {
  Array y(be, {w.dim(1), compute::conv_transpose2d_out_size(x.dim(1), w.dim(2), p),
               compute::conv_transpose2d_out_size(x.dim(2), w.dim(3), p)});
  be.conv_transpose2d(map(x), w, b, p, y.data());
  return y;
}

Array resize(compute::Backend& be, const Array& x, int64_t out_h, int64_t out_w) {
  Array y(be, {x.dim(0), out_h, out_w});
  be.resize_bilinear(map(x), out_h, out_w, y.data());
  return y;
}

}  // namespace

DptPositionTables dpt_position_tables(int64_t channels, int64_t h, int64_t w, double aspect) {
  LINGBOT_CHECK(channels > 0 && channels % 4 == 0, "DPT position embedding: channels must be a positive multiple of 4, got ",
                channels);
  // UV grid (heads/utils.py create_uv_grid), spans normalised by the diagonal.
  const double diag = std::pow(aspect * aspect + 1.0, 0.5);
  const double span_x = aspect / diag, span_y = 1.0 / diag;
  const double wd = static_cast<double>(w), hd = static_cast<double>(h);
  const std::vector<float> xs = linspace_f32(-span_x * (wd - 1) / wd, span_x * (wd - 1) / wd, w);
  const std::vector<float> ys = linspace_f32(-span_y * (hd - 1) / hd, span_y * (hd - 1) / hd, h);
  const int64_t quarter = channels / 4;  // frequencies per axis
  std::vector<double> omega(static_cast<size_t>(quarter));
  for (int64_t i = 0; i < quarter; ++i)
    omega[i] = 1.0 / std::pow(100.0, static_cast<double>(i) / static_cast<double>(quarter));
  auto table = [&](const std::vector<float>& p) {  // [2·quarter, n]: sin rows then cos rows
    Tensor t({2 * quarter, static_cast<int64_t>(p.size())});
    float* d = t.f32();
    for (int64_t i = 0; i < quarter; ++i)
      for (size_t j = 0; j < p.size(); ++j) {
        const double arg = static_cast<double>(p[j]) * omega[i];
        d[i * p.size() + j] = static_cast<float>(std::sin(arg)) * 0.1f;
        d[(quarter + i) * p.size() + j] = static_cast<float>(std::cos(arg)) * 0.1f;
      }
    return t;
  };
  return {table(xs), table(ys)};
}

Tensor dpt_position_embedding(int64_t channels, int64_t h, int64_t w, double aspect) {
  const DptPositionTables t = dpt_position_tables(channels, h, w, aspect);
  Tensor pe({channels, h, w});
  float* d = pe.f32();
  const float *tx = t.columns.f32(), *ty = t.rows.f32();
  const int64_t half = channels / 2;
  for (int64_t c = 0; c < half; ++c)
    for (int64_t r = 0; r < h; ++r) {
      std::copy(tx + c * w, tx + (c + 1) * w, d + (c * h + r) * w);
      std::fill(d + ((half + c) * h + r) * w, d + ((half + c) * h + r + 1) * w, ty[c * h + r]);
    }
  return pe;
}

namespace {

// x [C, h, w] += the position embedding (dpt_position_tables), on the backend.
void add_position_embedding(compute::Backend& be, Array& x, double aspect) {
  const DptPositionTables t = dpt_position_tables(x.dim(0), x.dim(1), x.dim(2), aspect);
  const Array columns = be.upload_array(t.columns), rows = be.upload_array(t.rows);
  be.add_axis_tables(x.data(), x.dim(0), x.dim(1), x.dim(2), columns.data(), rows.data());
}

}  // namespace

bool DptHead::keeps_weights_dtype(std::string_view name) {
  if (!name.ends_with(".weight") || name.starts_with("norm.") || name.starts_with("resize_layers.0.") ||
      name.starts_with("resize_layers.1.") || name.starts_with("scratch.output_conv2.2."))
    return false;
  return name.starts_with("projects.") || name.starts_with("resize_layers.3.") || name.starts_with("scratch.");
}

DptHead::DptHead(const DptHeadConfig& config, io::TensorMap& w, DType weights_dtype, const std::string& prefix)
    : cfg_(config) {
  const int64_t D = cfg_.dim_in, F = cfg_.features, F2 = cfg_.head_features_2;
  const auto& oc = cfg_.out_channels;
  LINGBOT_CHECK(cfg_.output_dim == 2, "DPT head: output_dim must be 2 (depth, confidence), got ", cfg_.output_dim);
  LINGBOT_CHECK(F % 8 == 0, "DPT head: features must be a multiple of 8, got ", F);
  for (int64_t c : oc) LINGBOT_CHECK(c > 0 && c % 4 == 0, "DPT head: out_channels must be multiples of 4, got ", c);
  auto take = [&](const std::string& name, const Shape& shape) {
    return take_weight(w, prefix + name, shape, keeps_weights_dtype(name) ? weights_dtype : DType::F32);
  };
  auto conv = [&](const std::string& name, const Shape& shape) {  // weight and bias
    return Conv{take(name + ".weight", shape), take(name + ".bias", {shape[0]})};
  };
  auto conv_without_bias = [&](const std::string& name, const Shape& shape) {
    return Conv{take(name + ".weight", shape), Tensor()};
  };
  norm_w_ = take("norm.weight", {D});
  norm_b_ = take("norm.bias", {D});
  for (int l = 0; l < 4; ++l) {
    projects_[l] = conv("projects." + std::to_string(l), {oc[l], D, 1, 1});
    projects_[l].w.reshape({oc[l], D});  // a 1x1 conv on token rows is a linear layer
    layer_rn_[l] = conv_without_bias("scratch.layer" + std::to_string(l + 1) + "_rn", {F, oc[l], 3, 3});
  }
  // ConvTranspose2d weights are [in, out, k, k]; their bias has `out` entries (= in here).
  resize0_ = conv("resize_layers.0", {oc[0], oc[0], 4, 4});
  resize1_ = conv("resize_layers.1", {oc[1], oc[1], 2, 2});
  resize3_ = conv("resize_layers.3", {oc[3], oc[3], 3, 3});
  for (int i = 0; i < 4; ++i) {
    const std::string p = "scratch.refinenet" + std::to_string(i + 1) + ".";
    Fusion& f = refine_[i];
    f.has_residual = i != 3;  // refinenet4 has no skip input
    if (f.has_residual)
      f.rcu1 = {conv(p + "resConfUnit1.conv1", {F, F, 3, 3}), conv(p + "resConfUnit1.conv2", {F, F, 3, 3})};
    f.rcu2 = {conv(p + "resConfUnit2.conv1", {F, F, 3, 3}), conv(p + "resConfUnit2.conv2", {F, F, 3, 3})};
    f.out_conv = conv(p + "out_conv", {F, F, 1, 1});
  }
  out_conv1_ = conv("scratch.output_conv1", {F / 2, F, 3, 3});
  out_conv2a_ = conv("scratch.output_conv2.0", {F2, F / 2, 3, 3});
  out_conv2b_ = conv("scratch.output_conv2.2", {cfg_.output_dim, F2, 1, 1});
}

Array DptHead::rcu(compute::Backend& be, const Rcu& u, const Array& x) const {
  const compute::ConvParams same{1, 1};
  Array r = clone(be, x);
  relu_inplace(be, r);
  Array c = conv(be, r, u.conv1.w, u.conv1.bias(), same);
  relu_inplace(be, c);
  Array y = conv(be, c, u.conv2.w, u.conv2.bias(), same);
  add_into(be, y, r);  // the skip is relu(x): upstream's in-place ReLU overwrote x
  return y;
}

Array DptHead::fusion(compute::Backend& be, const Fusion& f, const Array& x, const Array* skip, int64_t out_h,
                      int64_t out_w) const {
  Array out = clone(be, x);
  if (f.has_residual) add_into(be, out, rcu(be, f.rcu1, *skip));
  out = rcu(be, f.rcu2, out);
  out = resize(be, out, out_h, out_w);
  return conv(be, out, f.out_conv.w, f.out_conv.bias(), {1, 0});
}

DepthOutput DptHead::forward(compute::Backend& be, const std::array<RowsView, 4>& layers, ImageSize image) const {
  const int64_t D = cfg_.dim_in, ps = cfg_.patch_size;
  LINGBOT_CHECK(image.height > 0 && image.width > 0 && image.height % ps == 0 && image.width % ps == 0,
                "DPT head: image size ", image.height, "x", image.width, " must be positive multiples of patch size ",
                ps);
  const int64_t ph = image.height / ps, pw = image.width / ps, np = ph * pw;
  for (int l = 0; l < 4; ++l) {
    const RowsView& v = layers[l];
    LINGBOT_CHECK(v.data != nullptr && v.rows == np && v.cols == D && v.stride() >= D, "DPT head: layer ", l,
                  " patch tokens must be [", np, ", ", D, "] for a ", image.height, "x", image.width,
                  " image, got [", v.rows, ", ", v.cols, "]");
  }
  const double aspect = static_cast<double>(image.width) / static_cast<double>(image.height);

  std::array<Array, 4> rn;
  Array normed(be, {np, D});
  for (int l = 0; l < 4; ++l) {
    const int64_t oc = cfg_.out_channels[l];
    be.layer_norm(layers[l].data, np, D, &norm_w_, &norm_b_, cfg_.ln_eps, normed.data(), layers[l].stride());
    // 1x1 projection on the token rows ([np, oc]), then to channel-major [oc, ph, pw] plus the embedding.
    Array proj(be, {np, oc});
    be.linear(normed.data(), np, projects_[l].w, &projects_[l].b, proj.data());
    Array x(be, {oc, ph, pw});  // zeros
    be.add_transposed(x.data(), proj.data(), np, oc);
    add_position_embedding(be, x, aspect);
    switch (l) {
      case 0: x = conv_t(be, x, resize0_.w, resize0_.bias(), {4, 0}); break;
      case 1: x = conv_t(be, x, resize1_.w, resize1_.bias(), {2, 0}); break;
      case 2: break;
      default: x = conv(be, x, resize3_.w, resize3_.bias(), {2, 1}); break;
    }
    rn[l] = conv(be, x, layer_rn_[l].w, nullptr, {1, 1});
  }

  Array out = fusion(be, refine_[3], rn[3], nullptr, rn[2].dim(1), rn[2].dim(2));
  out = fusion(be, refine_[2], out, &rn[2], rn[1].dim(1), rn[1].dim(2));
  out = fusion(be, refine_[1], out, &rn[1], rn[0].dim(1), rn[0].dim(2));
  out = fusion(be, refine_[0], out, &rn[0], rn[0].dim(1) * 2, rn[0].dim(2) * 2);
  out = conv(be, out, out_conv1_.w, out_conv1_.bias(), {1, 1});
  out = resize(be, out, ph * ps, pw * ps);
  add_position_embedding(be, out, aspect);
  out = conv(be, out, out_conv2a_.w, out_conv2a_.bias(), {1, 1});
  relu_inplace(be, out);
  out = conv(be, out, out_conv2b_.w, out_conv2b_.bias(), {1, 0});

  // The output activations on the host: depth = exp(ch0), conf = 1 + exp(ch1).
  const Tensor raw = be.download_array(out);
  const int64_t H = image.height, W = image.width, plane = H * W;
  DepthOutput res{Tensor({H, W}), Tensor({H, W})};
  const float* o = raw.f32();
  float* dd = res.depth.f32();
  float* cd = res.conf.f32();
  for (int64_t i = 0; i < plane; ++i) {
    dd[i] = std::exp(o[i]);
    cd[i] = 1.0f + std::exp(o[plane + i]);
  }
  return res;
}

}  // namespace lingbot::model
