#include "bench/harness/verify.h"

#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/memory_stats.h"
#include "core/printf_string.h"
#include "io/file_util.h"
#include "io/image.h"
#include "io/safetensors.h"
#include "lingbot/session.h"
#include "lingbot/windowed.h"

namespace lingbot {

namespace fs = std::filesystem;
using nlohmann::json;

bool VerifyReport::passed() const {
  return std::none_of(rows.begin(), rows.end(), [](const VerifyRow& r) { return r.counts_as_failure(); });
}

namespace {

std::string frames_str(const std::vector<int64_t>& f) {
  if (f.empty()) return "-";
  bool contiguous = true;
  for (size_t i = 1; i < f.size(); ++i) contiguous = contiguous && f[i] == f[i - 1] + 1;
  if (contiguous && f.size() > 2) return std::to_string(f.front()) + "-" + std::to_string(f.back());
  std::string s;
  for (int64_t v : f) {
    if (!s.empty()) s += ',';
    s += std::to_string(v);
  }
  return s;
}

std::string sci(double v) { return printf_string("%.2e", v); }

// Everything the engine produced during the run, kept only for what the reference stores.
struct EngineRun {
  std::map<int64_t, std::vector<Tensor>> features;  // frame -> per selected layer [P, 2C]
  Tensor patch_tokens_frame0;
  std::map<std::string, std::vector<Tensor>> heads;  // tensor name -> per frame (empty if not produced)
  // Integer tensors by reference name: per frame (is_keyframe, frame_type, ...), per step (cache traces,
  // step_*), per window row (window_row_*, window_raw_frame_type, ...) or per window (window_bounds).
  std::map<std::string, std::vector<int64_t>> ints;
  std::map<std::string, std::string> int_axis;         // name -> "frames" | "steps" | "rows" | "windows"
  std::map<std::string, std::vector<Tensor>> rows;     // window_raw_pose_enc / window_raw_depth per row
  std::vector<double> flow, row_flow;                  // flow_magnitude per frame, window_raw_flow per row
  std::vector<int64_t> frame_window, row_window;       // window each stitched frame / row comes from
  std::vector<float> chunk_scales;
  std::vector<float> chunk_transforms;                 // [n, 4, 4]
};

// The model input: reference `images` [S, 3, H, W], or (formats without it) frames/NNNNNN.png / 255.
Tensor load_case_images(const fs::path& dir, const io::SafetensorsReader& ref, const GoldenCase& gc) {
  if (ref.find("images")) {
    Tensor images = ref.read("images", DType::F32);
    LINGBOT_CHECK(images.ndim() == 4 && images.dim(1) == 3, "reference.safetensors: images must be [S, 3, H, W], got ",
                  shape_str(images.shape()));
    return images;
  }
  LINGBOT_CHECK(gc.num_frames && gc.height && gc.width,
                "case.json: scenario.num_frames and scenario.image_hw are needed when reference.safetensors has no images");
  const int64_t S = *gc.num_frames, H = *gc.height, W = *gc.width;
  Tensor images({S, 3, H, W});
  for (int64_t i = 0; i < S; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "%06lld.png", static_cast<long long>(i));
    const io::ImageU8 img = io::load_image(dir / "frames" / name);
    LINGBOT_CHECK(img.width == W && img.height == H, "frames/", name, " is ", img.width, "x", img.height,
                  " (WxH), case.json scenario.image_hw says ", W, "x", H);
    float* out = images.f32() + i * 3 * H * W;
    for (int64_t p = 0; p < H * W; ++p)
      for (int64_t c = 0; c < 3; ++c) out[c * H * W + p] = static_cast<float>(img.rgb[static_cast<size_t>(p * 3 + c)]) / 255.0f;
  }
  return images;
}

// Float comparison: max |a - r| and that over max|r|.
struct FloatDiff {
  double max_abs = 0.0, max_ref = 0.0;
};
void accumulate(FloatDiff& d, const float* a, const float* r, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double diff = std::abs(static_cast<double>(a[i]) - static_cast<double>(r[i]));
    d.max_abs = std::isnan(diff) ? INFINITY : std::max(d.max_abs, diff);
    d.max_ref = std::max(d.max_ref, std::abs(static_cast<double>(r[i])));
  }
}

bool matches_only(const std::vector<std::string>& only, const std::string& name) {
  if (only.empty()) return true;
  return std::any_of(only.begin(), only.end(),
                     [&](const std::string& p) { return fnmatch(p.c_str(), name.c_str(), 0) == 0; });
}

// Tolerance scale for reduced-precision K/V storage (the README's bounds are for f32 compute).
double dtype_factor(DType t) { return t == DType::F32 ? 1.0 : t == DType::F16 ? 50.0 : 400.0; }
// Unit roundoff of a storage dtype (0 for f32: its rounding is below every tolerance here).
double unit_roundoff(DType t) { return t == DType::BF16 ? 0x1p-8 : t == DType::F16 ? 0x1p-11 : 0.0; }

}  // namespace

VerifyReport run_verify(const VerifyOptions& vo) {
  const fs::path dir(vo.case_dir);
  // A symbolic link loop or an unreadable path is named as such (fs::exists would throw its own text).
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  LINGBOT_CHECK(ec != std::errc::too_many_symbolic_link_levels, "verify: case directory '", vo.case_dir,
                "' is a symbolic link loop (", ec.message(), ")");
  LINGBOT_CHECK(!ec || ec == std::errc::no_such_file_or_directory, "verify: cannot access case directory '",
                vo.case_dir, "': ", ec.message());
  // FileNotFound (Python: also a FileNotFoundError), with its "<what> not found: <path>" message.
  if (!fs::exists(st)) throw FileNotFound(detail::concat("verify: golden case folder not found: ", vo.case_dir), vo.case_dir);
  LINGBOT_CHECK(fs::is_directory(dir), "verify: '", vo.case_dir, "' is not a folder (give the case folder, the one holding case.json)");
  const std::vector<uint8_t> case_json = io::read_file_bytes(dir / "case.json", "golden case file");
  const GoldenCase gc = parse_case_json(std::string(case_json.begin(), case_json.end()), (dir / "case.json").string());
  const int K = gc.scale_frames;

  VerifyReport report;
  report.case_name = gc.case_name.empty() ? dir.filename().string() : gc.case_name;
  const KVBackend backend = vo.kv_backend.value_or(KVBackend::Paged);
  const DType kv_dtype = vo.kv_dtype.value_or(DType::F32);
  report.backend = kv_backend_name(backend);
  report.kv_dtype = std::string(dtype_name(kv_dtype));

  const io::SafetensorsReader ref = io::SafetensorsReader::open((dir / "reference.safetensors").string());
  // A pattern list that selects nothing would "pass" with 0 checks: a typo must not look green.
  LINGBOT_CHECK(vo.only.empty() || std::any_of(ref.entries().begin(), ref.entries().end(),
                                               [&](const auto& e) { return matches_only(vo.only, e.name); }),
                "verify: the --only list (Python: only=) selects no tensor of ", vo.case_dir, " (names as listed in its report, e.g. depth, pose_enc*)");
  const Tensor images = load_case_images(dir, ref, gc);
  const int64_t S = images.dim(0), H = images.dim(2), W = images.dim(3);
  report.frames = S;
  std::set<int64_t> feature_frames;
  if (ref.find("aggregated_frame_index")) {
    for (int64_t f : ref.read_int("aggregated_frame_index").values) feature_frames.insert(f);
  }

  ModelLoadOptions mo;
  mo.weights_dtype = vo.weights_dtype;
  report.weights_dtype = std::string(dtype_name(vo.weights_dtype));
  auto model = Model::load((dir / gc.weights_file).string(), gc.overrides, mo);

  SessionOptions so;
  so.device = vo.device;
  so.kv_backend = backend;
  so.kv_dtype = kv_dtype;
  so.scale_frames = K;
  so.kv_window = gc.sliding_window;
  so.keyframe_interval = gc.keyframe_interval;
  so.camera_iterations = gc.camera_iterations;
  so.cross_frame_special = gc.cross_frame_special;
  so.include_scale_frames = gc.include_scale_frames;
  so.camera_only = gc.camera_only;
  so.threads = vo.threads;
  so.keep_features = !feature_frames.empty();
  so.keep_patch_tokens = true;
  if (gc.flow_threshold > 0)
    so.keyframe_policy = std::make_shared<FlowKeyframes>(gc.flow_threshold,
                                                         gc.max_non_keyframe_gap.value_or(kDefaultMaxNonKeyframeGap));
  const bool windowed = gc.windowed;

  EngineRun run;
  auto& r_is_kf = run.ints["is_keyframe"];
  auto& r_type = run.ints["frame_type"];
  auto& r_rope = run.ints["rope_time_index"];
  auto& r_flow_kf = run.ints["flow_keyframe"];
  auto& r_source = run.ints["frame_source_row"];
  for (auto* v : {&r_is_kf, &r_type, &r_rope, &r_flow_kf, &r_source}) v->assign(static_cast<size_t>(S), -1);
  for (const char* n : {"is_keyframe", "frame_type", "rope_time_index", "flow_keyframe", "frame_source_row"})
    run.int_axis[n] = "frames";
  for (const char* n : {"kv_cache_frames_after_step", "kv_cache_special_tokens_after_step",
                        "kv_cache_visible_tokens_after_step", "camera_kv_frames_after_step", "step_window",
                        "step_first_frame", "step_num_frames", "step_rope_time_start"})
    run.int_axis[n] = "steps";
  for (const char* n : {"window_row_frame_index", "window_row_window", "window_raw_frame_type",
                        "window_raw_flow_keyframe"})
    run.int_axis[n] = "rows";
  run.int_axis["window_bounds"] = "windows";
  run.flow.assign(static_cast<size_t>(S), -1.0);
  run.frame_window.assign(static_cast<size_t>(S), 0);
  std::map<std::pair<int64_t, int64_t>, int64_t> row_of;  // (window, frame) -> row id

  auto record_step = [&](int64_t window, int64_t first, int64_t n, int64_t rope, const SessionStats& st) {
    run.ints["kv_cache_frames_after_step"].push_back(st.cache.frames_resident);
    run.ints["kv_cache_special_tokens_after_step"].push_back(st.cache.kept_special_tokens);
    run.ints["kv_cache_visible_tokens_after_step"].push_back(st.cache.visible_tokens);
    run.ints["camera_kv_frames_after_step"].push_back(st.camera_cache_frames);
    run.ints["step_window"].push_back(window);
    run.ints["step_first_frame"].push_back(first);
    run.ints["step_num_frames"].push_back(n);
    run.ints["step_rope_time_start"].push_back(rope);
  };
  auto record_row = [&](int64_t window, int64_t row, const FrameResult& r) {
    row_of[{window, r.frame_index}] = row;
    run.ints["window_row_frame_index"].push_back(r.frame_index);
    run.ints["window_row_window"].push_back(window);
    run.ints["window_raw_frame_type"].push_back(static_cast<int64_t>(r.frame_type));
    run.ints["window_raw_flow_keyframe"].push_back(r.frame_type == FrameType::Scale ? -1 : r.flow_reference_frame);
    run.row_flow.push_back(r.frame_type == FrameType::Scale ? -1.0 : r.flow);
    run.row_window.push_back(window);
    run.rows["window_raw_pose_enc"].push_back(r.pose_enc.clone());
    run.rows["window_raw_depth"].push_back(r.depth.clone());
  };
  auto collect = [&](std::vector<FrameResult>&& results) {
    for (FrameResult& r : results) {
      const auto fi = static_cast<size_t>(r.frame_index);
      LINGBOT_CHECK(r.frame_index >= 0 && r.frame_index < S, "internal: result for frame ", r.frame_index);
      r_is_kf[fi] = r.is_keyframe ? 1 : 0;
      r_type[fi] = static_cast<int64_t>(r.frame_type);
      r_rope[fi] = r.rope_time_index;
      r_flow_kf[fi] = r.frame_type == FrameType::Scale ? -1 : r.flow_reference_frame;
      run.flow[fi] = r.frame_type == FrameType::Scale ? -1.0 : r.flow;
      run.frame_window[fi] = r.window_index;
      if (auto it = row_of.find({r.window_index, r.frame_index}); it != row_of.end()) r_source[fi] = it->second;
      if (r.frame_index == 0) run.patch_tokens_frame0 = std::move(r.patch_tokens);
      if (feature_frames.count(r.frame_index)) run.features[r.frame_index] = std::move(r.features);
      auto keep = [&](const char* name, Tensor& t) {
        auto& v = run.heads[name];
        v.resize(static_cast<size_t>(S));
        v[fi] = std::move(t);
      };
      keep("pose_enc", r.pose_enc);
      keep("pose_enc_iters", r.pose_enc_iters);
      keep("extrinsic", r.extrinsic);
      keep("intrinsic", r.intrinsic);
      keep("extrinsic_c2w", r.extrinsic_c2w);
      keep("depth", r.depth);
      keep("depth_conf", r.depth_conf);
      keep("world_points", r.world_points);
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t frame_elems = 3 * H * W;
  if (windowed) {
    WindowedOptions wopt;
    wopt.window_size = *gc.window_size;
    if (gc.overlap_size) wopt.overlap_size = *gc.overlap_size;
    if (gc.overlap_keyframes) wopt.overlap_keyframes = *gc.overlap_keyframes;
    WindowObserver obs;
    obs.on_step = record_step;
    obs.on_row = record_row;
    WindowedSession session(model, so, wopt, obs);
    report.threads = session.options().threads;
    for (int64_t i = 0; i < S; ++i) {
      Tensor frame({3, H, W});
      std::memcpy(frame.f32(), images.f32() + i * frame_elems, static_cast<size_t>(frame_elems) * sizeof(float));
      collect(session.push_frame(frame));
    }
    collect(session.finish());
    for (const WindowInfo& w : session.windows()) {
      run.ints["window_bounds"].push_back(w.start);
      run.ints["window_bounds"].push_back(w.end);
      run.chunk_scales.push_back(w.scale);
      run.chunk_transforms.insert(run.chunk_transforms.end(), w.transform.begin(), w.transform.end());
    }
  } else {
    Session session(model, so);
    report.threads = session.options().threads;
    auto push = [&](std::vector<FrameResult>&& results) {
      if (results.empty()) return;
      record_step(0, results.front().frame_index, static_cast<int64_t>(results.size()),
                  results.front().rope_time_index, session.stats());
      collect(std::move(results));
    };
    for (int64_t i = 0; i < S; ++i) push(session.push_frame(images.f32() + i * frame_elems, H, W));
    push(session.finish());
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report.peak_rss_bytes = peak_rss_bytes();
  const auto& conditioning = gc.flow_well_conditioned;

  std::vector<int64_t> all_frames(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) all_frames[static_cast<size_t>(i)] = i;
  const double kf = verify_tolerance_scale(kv_dtype, vo.weights_dtype);
  char kf_text[32];
  std::snprintf(kf_text, sizeof kf_text, "%g", kf);
  std::string kv_note;
  if (kv_dtype != DType::F32) kv_note = report.kv_dtype + " K/V";
  if (vo.weights_dtype != DType::F32) kv_note += (kv_note.empty() ? "" : ", ") + report.weights_dtype + " weights";
  if (!kv_note.empty()) kv_note = " x" + std::string(kf_text) + " (" + kv_note + ")";

  for (const auto& e : ref.entries()) {
    VerifyRow row;
    row.tensor = e.name;
    if (e.name == "images") {
      row.status = "input";
      row.frames = frames_str(all_frames);
      row.note = "fed to the session";
      report.rows.push_back(row);
      continue;
    }
    if (e.name == "aggregated_frame_index") {
      row.status = "index";
      row.frames = frames_str({feature_frames.begin(), feature_frames.end()});
      row.note = "selects the aggregated_* rows";
      report.rows.push_back(row);
      continue;
    }
    if (!matches_only(vo.only, e.name)) {
      row.status = "SKIP";
      row.note = "excluded by --only";
      report.rows.push_back(row);
      continue;
    }
    auto finish_float = [&](const FloatDiff& d, double bound_rel_to_max, const std::string& tol_text) {
      row.max_abs = d.max_abs;
      row.max_rel = d.max_ref > 0 ? d.max_abs / d.max_ref : 0.0;
      row.tolerance = tol_text + kv_note;
      row.kv_scale = kf;
      row.status = d.max_abs <= bound_rel_to_max * kf * d.max_ref ? "ok" : "FAIL";
    };
    auto compare_ints = [&](const std::vector<int64_t>& engine, const std::string& axis) {
      const io::IntTensor t = ref.read_int(e.name);
      row.tolerance = "exact";
      const int64_t items = t.shape.empty() ? 0 : t.shape[0];  // window_bounds is [n, 2]
      row.frames = axis == "frames" ? frames_str(all_frames) : axis + " 0-" + std::to_string(items - 1);
      if (engine.size() != t.values.size()) {
        row.status = "FAIL";
        row.note = "engine produced " + std::to_string(engine.size()) + " values, reference has " +
                   std::to_string(t.values.size());
        return;
      }
      for (size_t i = 0; i < engine.size(); ++i)
        row.max_abs = std::max(row.max_abs, static_cast<double>(std::llabs(engine[i] - t.values[i])));
      row.status = row.max_abs == 0 ? "ok" : "FAIL";
      if (row.max_abs != 0) {
        std::string ev, rv;
        for (size_t i = 0; i < engine.size(); ++i) {
          if (i) {
            ev += ',';
            rv += ',';
          }
          ev += std::to_string(engine[i]);
          rv += std::to_string(t.values[i]);
        }
        row.note = "engine [" + ev + "] vs reference [" + rv + "]";
      }
    };

    if (e.name == "patch_tokens_frame0") {
      const Tensor r = ref.read(e.name, DType::F32);
      row.frames = "0";
      if (run.patch_tokens_frame0.empty() || run.patch_tokens_frame0.numel() != r.numel()) {
        row.status = "FAIL";
        row.note = "engine produced no frame-0 patch tokens of shape " + shape_str(r.shape());
      } else {
        FloatDiff d;
        accumulate(d, run.patch_tokens_frame0.f32(), r.f32(), r.numel());
        finish_float(d, 1e-4, "1e-4*max|ref|");
      }
    } else if (e.name.rfind("aggregated_", 0) == 0) {
      const Tensor r = ref.read(e.name, DType::F32);
      const size_t layer = static_cast<size_t>(std::stoll(e.name.substr(11)));
      const io::IntTensor idx = ref.read_int("aggregated_frame_index");
      row.frames = frames_str(idx.values);
      FloatDiff d;
      const int64_t per = r.numel() / std::max<int64_t>(1, r.dim(0));
      std::string missing;
      for (int64_t k = 0; k < r.dim(0); ++k) {
        const int64_t f = idx.values[static_cast<size_t>(k)];
        auto it = run.features.find(f);
        if (it == run.features.end() || layer >= it->second.size() || it->second[layer].numel() != per) {
          if (!missing.empty()) missing += ',';
          missing += std::to_string(f);
          continue;
        }
        accumulate(d, it->second[layer].f32(), r.f32() + k * per, per);
      }
      if (!missing.empty()) {
        row.status = "FAIL";
        row.note = "engine produced no layer-" + std::to_string(layer) + " features of shape [" +
                   std::to_string(r.dim(1)) + ", " + std::to_string(r.dim(2)) + "] for frames " + missing;
      } else {
        finish_float(d, 1e-4, "1e-4*max|ref|");
      }
    } else if (run.int_axis.count(e.name)) {
      compare_ints(run.ints[e.name], run.int_axis.at(e.name));
    } else if (e.name == "flow_magnitude" || e.name == "window_raw_flow") {
      // Relative 1e-3 per well-conditioned value; -1 (scale rows) exactly; the values of rows the
      // reference marks ill-conditioned are not compared (their decisions are, through frame_type).
      const Tensor r = ref.read(e.name, DType::F32);
      const bool per_frame = e.name == "flow_magnitude";
      const std::vector<double>& eng = per_frame ? run.flow : run.row_flow;
      const std::vector<int64_t>& win = per_frame ? run.frame_window : run.row_window;
      const std::vector<int64_t>* row_frames = per_frame ? nullptr : &run.ints["window_row_frame_index"];
      // Reduced precision: 48 u of the coarsest dtype in use (flow compares two reprojections, so it
      // amplifies depth and pose errors: measured up to 24 u with bf16 weights on streaming-flow-tiny).
      const double u = std::max(unit_roundoff(kv_dtype), unit_roundoff(vo.weights_dtype));
      const double flow_tol = u > 0 ? 48.0 * u : 1e-3;
      char flow_text[64];
      if (u > 0) std::snprintf(flow_text, sizeof flow_text, "48u = %g rel (well-conditioned)", flow_tol);
      row.tolerance = u > 0 ? flow_text : "1e-3 rel (well-conditioned)";
      row.frames = per_frame ? frames_str(all_frames) : "rows 0-" + std::to_string(r.numel() - 1);
      if (static_cast<int64_t>(eng.size()) != r.numel()) {
        row.status = "FAIL";
        row.note = "engine produced " + std::to_string(eng.size()) + " values, reference has " + std::to_string(r.numel());
      } else {
        double worst = 0.0;
        int skipped = 0;
        std::string bad;
        for (int64_t i = 0; i < r.numel(); ++i) {
          const double rv = r.f32()[i], ev = eng[static_cast<size_t>(i)];
          const int64_t frame = per_frame ? i : (*row_frames)[static_cast<size_t>(i)];
          row.max_abs = std::max(row.max_abs, std::abs(ev - rv));
          if (rv < 0 || ev < 0) {
            if (rv != ev) bad += (bad.empty() ? "" : ",") + std::to_string(i);
            continue;
          }
          auto it = conditioning.find({frame, win[static_cast<size_t>(i)]});
          if (it != conditioning.end() && !it->second) {
            ++skipped;
            continue;
          }
          const double rel = std::abs(ev - rv) / std::max(std::abs(rv), 1e-12);
          worst = std::max(worst, rel);
          if (rel > flow_tol) bad += (bad.empty() ? "" : ",") + std::to_string(i);
        }
        row.max_rel = worst;
        row.status = bad.empty() ? "ok" : "FAIL";
        if (!bad.empty()) row.note = "outside tolerance at " + std::string(per_frame ? "frames " : "rows ") + bad;
        else if (skipped) row.note = std::to_string(skipped) + " ill-conditioned value(s) not compared";
      }
    } else if (e.name == "chunk_scales" || e.name == "chunk_transforms") {
      const Tensor r = ref.read(e.name, DType::F32);
      const std::vector<float>& eng = e.name == "chunk_scales" ? run.chunk_scales : run.chunk_transforms;
      row.frames = "windows 0-" + std::to_string(r.dim(0) - 1);
      if (static_cast<int64_t>(eng.size()) != r.numel()) {
        row.status = "FAIL";
        row.note = "engine produced " + std::to_string(eng.size()) + " values, reference has " + std::to_string(r.numel());
      } else {
        FloatDiff d;
        accumulate(d, eng.data(), r.f32(), r.numel());
        row.max_abs = d.max_abs;
        row.max_rel = d.max_ref > 0 ? d.max_abs / d.max_ref : 0.0;
        row.kv_scale = kf;
        if (e.name == "chunk_scales") {
          double worst = 0.0;
          for (int64_t i = 0; i < r.numel(); ++i)
            worst = std::max(worst, std::abs(double(eng[static_cast<size_t>(i)]) - r.f32()[i]) /
                                        std::max(std::abs(double(r.f32()[i])), 1e-12));
          row.tolerance = "1e-5 rel" + kv_note;
          row.status = worst <= 1e-5 * kf ? "ok" : "FAIL";
        } else {
          row.tolerance = "1e-4 abs" + kv_note;
          row.status = d.max_abs <= 1e-4 * kf ? "ok" : "FAIL";
        }
      }
    } else if (run.heads.count(e.name) || run.rows.count(e.name)) {
      // Per-frame head outputs: reference [S, ...] ([iters, S, 9] for pose_enc_iters).
      const Tensor r = ref.read(e.name, DType::F32);
      const bool iters_first = e.name == "pose_enc_iters";
      const int64_t frames = iters_first ? (r.ndim() > 1 ? r.dim(1) : 0) : r.dim(0);
      const int64_t lead = iters_first ? r.dim(0) : 1;
      const int64_t per = frames > 0 ? r.numel() / (frames * lead) : 0;
      const bool per_row = run.rows.count(e.name) > 0;
      const auto& eng = per_row ? run.rows.at(e.name) : run.heads.at(e.name);
      row.frames = per_row ? "rows 0-" + std::to_string(frames - 1) : frames_str(all_frames);
      FloatDiff d;
      double intrinsic_excess = 0.0;  // max |Δ| / max(|ref|, 1)
      std::string missing;
      row.frame_max_abs.assign(static_cast<size_t>(frames), 0.0);
      row.frame_max_ref.assign(static_cast<size_t>(frames), 0.0);
      for (int64_t f = 0; f < frames; ++f) {
        const Tensor* t = static_cast<size_t>(f) < eng.size() ? &eng[static_cast<size_t>(f)] : nullptr;
        if (!t || t->numel() != lead * per) {
          if (!missing.empty()) missing += ',';
          missing += std::to_string(f);
          continue;
        }
        FloatDiff df;
        for (int64_t l = 0; l < lead; ++l) {
          const float* rv = r.f32() + (l * frames + f) * per;
          const float* ev = t->f32() + l * per;
          accumulate(d, ev, rv, per);
          accumulate(df, ev, rv, per);
          for (int64_t i = 0; i < per; ++i)
            intrinsic_excess = std::max(
                intrinsic_excess, std::abs(static_cast<double>(ev[i]) - rv[i]) / std::max(1.0, std::abs(double(rv[i]))));
        }
        row.frame_max_abs[static_cast<size_t>(f)] = df.max_abs;
        row.frame_max_ref[static_cast<size_t>(f)] = df.max_ref;
      }
      if (!missing.empty()) {
        row.status = "FAIL";
        row.note = frames == S && missing.size() > 0 && eng.empty() ? "not implemented"
                                                                     : "engine produced no values for frames " + missing;
      } else if (e.name == "intrinsic") {
        row.max_abs = d.max_abs;
        row.max_rel = d.max_ref > 0 ? d.max_abs / d.max_ref : 0.0;
        row.tolerance = "1e-5*max(|ref|,1)" + kv_note;
        row.kv_scale = kf;
        row.status = intrinsic_excess <= 1e-5 * kf ? "ok" : "FAIL";
      } else if (e.name == "depth" || e.name == "depth_conf" || e.name == "world_points" ||
                 e.name == "window_raw_depth") {
        finish_float(d, 1e-4, "1e-4*max|ref|");
      } else {  // poses and extrinsics: absolute bound
        row.max_abs = d.max_abs;
        row.max_rel = d.max_ref > 0 ? d.max_abs / d.max_ref : 0.0;
        row.tolerance = "1e-4 abs" + kv_note;
        row.kv_scale = kf;
        row.status = d.max_abs <= 1e-4 * kf ? "ok" : "FAIL";
      }
    } else {
      row.status = "FAIL";
      row.note = "not implemented";
    }
    report.rows.push_back(row);
  }
  if (vo.keep_outputs) report.outputs = std::move(run.heads);
  return report;
}

double verify_tolerance_scale(DType kv_dtype, DType weights_dtype) {
  const double w = weights_dtype == DType::F32 ? 1.0 : weights_dtype == DType::F16 ? 250.0 : 2000.0;
  return dtype_factor(kv_dtype) + w - 1.0;
}

std::string format_verify_report(const VerifyReport& r) {
  std::ostringstream os;
  os << "case " << r.case_name << ": KV backend " << r.backend << ", KV dtype " << r.kv_dtype << ", weights dtype "
     << r.weights_dtype << ", " << r.threads
     << " thread(s), " << r.frames << " frames\n";
  // The tolerance column is as wide as its widest entry (reduced precision adds "x2399 (bf16 K/V, ...)").
  int tol_width = 34;
  for (const VerifyRow& row : r.rows) tol_width = std::max(tol_width, static_cast<int>(row.tolerance.size()));
  char line[768];
  std::snprintf(line, sizeof line, "%-36s %-14s %-12s %-12s %-*s %s\n", "tensor", "frames", "max abs err",
                "max rel err", tol_width, "tolerance", "ok");
  os << line;
  int failed = 0, ok = 0;
  for (const VerifyRow& row : r.rows) {
    const bool numeric = row.status == "ok" || (row.status == "FAIL" && row.note.empty());
    std::snprintf(line, sizeof line, "%-36s %-14s %-12s %-12s %-*s %s", row.tensor.c_str(),
                  row.frames.empty() ? "-" : row.frames.c_str(), numeric ? sci(row.max_abs).c_str() : "-",
                  numeric ? sci(row.max_rel).c_str() : "-", tol_width, row.tolerance.empty() ? "-" : row.tolerance.c_str(),
                  row.status.c_str());
    os << line;
    if (!row.note.empty()) os << " (" << row.note << ")";
    os << "\n";
    failed += row.counts_as_failure();
    ok += row.status == "ok";
  }
  std::snprintf(line, sizeof line, "%s: %d ok, %d failed; engine run %.2f s; peak RSS %.1f MiB\n",
                r.passed() ? "PASS" : "FAIL", ok, failed, r.seconds,
                static_cast<double>(r.peak_rss_bytes) / (1024.0 * 1024.0));
  os << line;
  return os.str();
}

}  // namespace lingbot
