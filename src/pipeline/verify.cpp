#include "pipeline/verify.h"

#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/memory_stats.h"
#include "io/safetensors.h"
#include "lingbot/session.h"

namespace lingbot {

namespace fs = std::filesystem;
using nlohmann::json;

bool VerifyReport::passed() const {
  return std::none_of(rows.begin(), rows.end(), [](const VerifyRow& r) { return r.counts_as_failure(); });
}

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  LINGBOT_CHECK(in.good(), "cannot open ", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

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

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

// Everything the engine produced during the run, kept only for what the reference stores.
struct EngineRun {
  std::map<int64_t, std::vector<Tensor>> features;  // frame -> per selected layer [P, 2C]
  Tensor patch_tokens_frame0;
  std::vector<int64_t> is_keyframe, rope_time;      // per frame
  std::vector<int64_t> frames_after, kept_specials_after, visible_after, camera_frames_after;  // per step
  std::map<std::string, std::vector<Tensor>> heads;  // tensor name -> per frame (empty if not produced)
};

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
double kv_factor(DType t) { return t == DType::F32 ? 1.0 : t == DType::F16 ? 50.0 : 400.0; }

}  // namespace

VerifyReport run_verify(const VerifyOptions& vo) {
  const fs::path dir(vo.case_dir);
  LINGBOT_CHECK(fs::is_directory(dir), "verify: case directory '", vo.case_dir, "' does not exist");
  const GoldenCase gc = parse_case_json(read_text(dir / "case.json"), (dir / "case.json").string());
  const int K = gc.scale_frames;

  VerifyReport report;
  report.case_name = gc.case_name.empty() ? dir.filename().string() : gc.case_name;
  const KVBackend backend = vo.backend.value_or(KVBackend::Paged);
  const DType kv_dtype = vo.kv_dtype.value_or(DType::F32);
  report.backend = kv_backend_name(backend);
  report.kv_dtype = std::string(dtype_name(kv_dtype));

  const io::SafetensorsReader ref = io::SafetensorsReader::open((dir / "reference.safetensors").string());
  const Tensor images = ref.read("images", DType::F32);
  LINGBOT_CHECK(images.ndim() == 4 && images.dim(1) == 3, "reference.safetensors: images must be [S, 3, H, W], got ",
                shape_str(images.shape()));
  const int64_t S = images.dim(0), H = images.dim(2), W = images.dim(3);
  report.frames = S;
  std::set<int64_t> feature_frames;
  if (ref.find("aggregated_frame_index")) {
    for (int64_t f : ref.read_int("aggregated_frame_index").values) feature_frames.insert(f);
  }

  auto model = Model::load((dir / gc.weights_file).string(), gc.overrides);

  SessionOptions so;
  so.backend = backend;
  so.kv_dtype = kv_dtype;
  so.scale_frames = K;
  so.sliding_window = gc.sliding_window;
  so.keyframe_interval = gc.keyframe_interval;
  so.camera_iterations = gc.camera_iterations;
  so.cross_frame_special = gc.cross_frame_special;
  so.include_scale_frames = gc.include_scale_frames;
  so.camera_only = gc.camera_only;
  so.threads = vo.threads;
  so.keep_features = !feature_frames.empty();
  so.keep_patch_tokens = true;
  Session session(model, so);
  report.threads = session.options().threads;

  EngineRun run;
  run.is_keyframe.assign(static_cast<size_t>(S), -1);
  run.rope_time.assign(static_cast<size_t>(S), -1);
  auto collect = [&](std::vector<FrameResult>&& results) {
    if (results.empty()) return;
    for (FrameResult& r : results) {
      run.is_keyframe[static_cast<size_t>(r.frame_index)] = r.is_keyframe ? 1 : 0;
      run.rope_time[static_cast<size_t>(r.frame_index)] = r.rope_time_index;
      if (r.frame_index == 0) run.patch_tokens_frame0 = std::move(r.patch_tokens);
      if (feature_frames.count(r.frame_index)) run.features[r.frame_index] = std::move(r.features);
      const auto fi = static_cast<size_t>(r.frame_index);
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
    const SessionStats st = session.stats();
    run.frames_after.push_back(st.cache.frames_resident);
    run.kept_specials_after.push_back(st.cache.kept_special_tokens);
    run.visible_after.push_back(st.cache.visible_tokens);
    run.camera_frames_after.push_back(st.camera_cache_frames);
  };
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t frame_elems = 3 * H * W;
  for (int64_t i = 0; i < S; ++i) collect(session.push_frame(images.f32() + i * frame_elems, H, W));
  collect(session.finish());
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report.peak_rss_bytes = peak_rss_bytes();

  std::vector<int64_t> all_frames(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) all_frames[static_cast<size_t>(i)] = i;
  const double kf = kv_factor(kv_dtype);
  char kf_text[32];
  std::snprintf(kf_text, sizeof kf_text, "%g", kf);
  const std::string kv_note = kv_dtype == DType::F32 ? "" : " x" + std::string(kf_text) + " (" + report.kv_dtype + " K/V)";

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
    auto compare_ints = [&](const std::vector<int64_t>& engine, const std::vector<int64_t>& frames_or_steps,
                            bool per_frame) {
      const io::IntTensor t = ref.read_int(e.name);
      row.tolerance = "exact";
      row.frames = per_frame ? frames_str(frames_or_steps) : "steps 0-" + std::to_string(t.values.size() - 1);
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
    } else if (e.name == "is_keyframe") {
      compare_ints(run.is_keyframe, all_frames, true);
    } else if (e.name == "rope_time_index") {
      compare_ints(run.rope_time, all_frames, true);
    } else if (e.name == "kv_cache_frames_after_step") {
      compare_ints(run.frames_after, {}, false);
    } else if (e.name == "kv_cache_special_tokens_after_step") {
      compare_ints(run.kept_specials_after, {}, false);
    } else if (e.name == "kv_cache_visible_tokens_after_step") {
      compare_ints(run.visible_after, {}, false);
    } else if (e.name == "camera_kv_frames_after_step") {
      compare_ints(run.camera_frames_after, {}, false);
    } else if (run.heads.count(e.name)) {
      // Per-frame head outputs: reference [S, ...] ([iters, S, 9] for pose_enc_iters).
      const Tensor r = ref.read(e.name, DType::F32);
      const bool iters_first = e.name == "pose_enc_iters";
      const int64_t frames = iters_first ? (r.ndim() > 1 ? r.dim(1) : 0) : r.dim(0);
      const int64_t lead = iters_first ? r.dim(0) : 1;
      const int64_t per = frames > 0 ? r.numel() / (frames * lead) : 0;
      const auto& eng = run.heads.at(e.name);
      row.frames = frames_str(all_frames);
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
      } else if (e.name == "depth" || e.name == "depth_conf" || e.name == "world_points") {
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

std::string format_verify_report(const VerifyReport& r) {
  std::ostringstream os;
  os << "case " << r.case_name << ": backend " << r.backend << ", kv dtype " << r.kv_dtype << ", " << r.threads
     << " thread(s), " << r.frames << " frames\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-36s %-14s %-12s %-12s %-34s %s\n", "tensor", "frames", "max abs err",
                "max rel err", "tolerance", "ok");
  os << line;
  int failed = 0, ok = 0;
  for (const VerifyRow& row : r.rows) {
    const bool numeric = row.status == "ok" || (row.status == "FAIL" && row.note.empty());
    std::snprintf(line, sizeof line, "%-36s %-14s %-12s %-12s %-34s %s", row.tensor.c_str(),
                  row.frames.empty() ? "-" : row.frames.c_str(), numeric ? sci(row.max_abs).c_str() : "-",
                  numeric ? sci(row.max_rel).c_str() : "-", row.tolerance.empty() ? "-" : row.tolerance.c_str(),
                  row.status.c_str());
    os << line;
    if (!row.note.empty()) os << " (" << row.note << ")";
    os << "\n";
    failed += row.counts_as_failure();
    ok += row.status == "ok";
  }
  std::snprintf(line, sizeof line, "%s: %d ok, %d failed; streaming run %.2f s; peak RSS %.1f MiB\n",
                r.passed() ? "PASS" : "FAIL", ok, failed, r.seconds,
                static_cast<double>(r.peak_rss_bytes) / (1024.0 * 1024.0));
  os << line;
  return os.str();
}

}  // namespace lingbot
