#include "bench/harness/golden_case.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lingbot {

using nlohmann::json;

namespace {

const json& need(const json& j, const std::string& key, const std::string& where) {
  LINGBOT_CHECK(j.is_object() && j.contains(key), "case.json: ", where, key, " is missing");
  return j.at(key);
}

// An integer field: a JSON integer within [lo, hi]. (nlohmann's get<int> of a number outside int's
// range is undefined behaviour, e.g. 1.7e67: found by fuzz_golden_case.)
int64_t as_int(const json& v, const std::string& name, int64_t lo = INT32_MIN, int64_t hi = INT32_MAX) {
  LINGBOT_CHECK(v.is_number_integer(), "case.json: ", name, " must be an integer, got ", v.dump());
  LINGBOT_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(hi), "case.json: ", name,
                " must be at most ", hi, ", got ", v.dump());
  const int64_t x = v.get<int64_t>();
  LINGBOT_CHECK(x >= lo && x <= hi, "case.json: ", name, " must be in [", lo, ", ", hi, "], got ", x);
  return x;
}

// An optional integer field of `obj` (absent or null: `fallback`).
int64_t int_or(const json& obj, const char* key, const std::string& where, int64_t fallback,
               int64_t lo = INT32_MIN, int64_t hi = INT32_MAX) {
  if (!obj.is_object() || !obj.contains(key) || obj.at(key).is_null()) return fallback;
  return as_int(obj.at(key), where + key, lo, hi);
}

std::string list_str(const json& arr) {
  std::string s;
  for (const auto& v : arr) {
    if (!s.empty()) s += ',';
    s += v.dump();
  }
  return s;
}

// Model hyperparameters stated by case.json that the shapes do not reveal -> ModelConfig overrides.
ConfigOverrides overrides_from_case(const json& model) {
  ConfigOverrides o;
  auto num = [&](const json& sec, const char* key, const char* cfg_key) {
    if (sec.is_object() && sec.contains(key) && !sec.at(key).is_null()) {
      const json& v = sec.at(key);
      o.emplace_back(cfg_key, v.is_array() ? list_str(v) : v.is_boolean() ? (v.get<bool>() ? "true" : "false")
                                                                            : v.dump());
    }
  };
  if (model.contains("aggregator")) {
    const json& a = model.at("aggregator");
    num(a, "num_heads", "aggregator.num_heads");
    num(a, "selected_layers", "aggregator.selected_layers");
    num(a, "rope2d_frequency", "aggregator.rope2d_frequency");
    num(a, "enable_3d_rope", "aggregator.enable_3d_rope");
    num(a, "rope3d_theta", "aggregator.rope3d_theta");
    num(a, "rope3d_fhw_dim", "aggregator.rope3d_fhw");
    num(a, "rope3d_max_seq_len", "aggregator.rope3d_max_frames");
  }
  if (model.contains("patch_encoder")) {
    const json& e = model.at("patch_encoder");
    num(e, "num_heads", "encoder.num_heads");
    num(e, "interpolate_offset", "encoder.interpolate_offset");
    num(e, "interpolate_antialias", "encoder.interpolate_antialias");
  }
  if (model.contains("camera_head") && model.at("camera_head").is_object()) {
    const json& c = model.at("camera_head");
    num(c, "num_heads", "camera.num_heads");
    num(c, "num_iterations", "camera.num_iterations");
  }
  if (model.contains("depth_head") && model.at("depth_head").is_object())
    num(model.at("depth_head"), "intermediate_layer_idx", "dpt.intermediate_layer_idx");
  return o;
}

// Options the engine does not implement must fail loudly.
void check_supported(const json& c) {
  if (c.contains("constructor_kwargs")) {
    const json& k = c.at("constructor_kwargs");
    auto is = [&](const char* key, const json& expected) { return !k.contains(key) || k.at(key) == expected; };
    LINGBOT_CHECK(is("sliding_window_size", -1), "case.json: constructor_kwargs.sliding_window_size = ",
                  k.value("sliding_window_size", json()).dump(), " is not supported (only -1)");
    LINGBOT_CHECK(is("enable_point", false), "case.json: constructor_kwargs.enable_point = true is not supported");
    LINGBOT_CHECK(is("enable_camera_3d_rope", false),
                  "case.json: constructor_kwargs.enable_camera_3d_rope = true is not supported");
  }
  if (c.contains("model") && c.at("model").contains("point_head"))
    LINGBOT_CHECK(c.at("model").at("point_head").is_null(), "case.json: model.point_head is not supported");
}

}  // namespace

GoldenCase parse_case_json(std::string_view text, const std::string& label) {
  json c;
  try {
    c = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(detail::concat(label, ": invalid JSON: ", e.what()));
  }
  // Wrong value types (a string where a number belongs) surface as nlohmann type errors: report
  // them as this file's error, like every other malformed field.
  try {
    LINGBOT_CHECK(c.is_object(), label, ": expected a JSON object");
    check_supported(c);
    const json& sc = need(c, "scenario", "");
    GoldenCase g;
    g.case_name = c.value("case", std::string());
    g.weights_file = need(c, "weights_file", "").get<std::string>();
    g.scale_frames = static_cast<int>(as_int(need(sc, "num_scale_frames", "scenario."), "scenario.num_scale_frames"));
    const int kvK = static_cast<int>(int_or(sc, "kv_cache_scale_frames", "scenario.", g.scale_frames));
    LINGBOT_CHECK(kvK == g.scale_frames, "case.json: scenario.kv_cache_scale_frames (", kvK, ") != num_scale_frames (",
                  g.scale_frames, ") is not supported: the engine uses one value for both");
    g.sliding_window =
        static_cast<int>(as_int(need(sc, "kv_cache_sliding_window", "scenario."), "scenario.kv_cache_sliding_window"));
    g.keyframe_interval = static_cast<int>(int_or(sc, "keyframe_interval", "scenario.", 1));
    g.camera_iterations = static_cast<int>(int_or(sc, "camera_num_iterations", "scenario.", 0));
    g.cross_frame_special = sc.value("kv_cache_cross_frame_special", true);
    g.include_scale_frames = sc.value("kv_cache_include_scale_frames", true);
    g.camera_only = sc.value("kv_cache_camera_only", false);
    if (c.contains("model")) g.overrides = overrides_from_case(c.at("model"));
    auto opt_int = [&](const char* key) -> std::optional<int> {
      if (!sc.contains(key) || sc.at(key).is_null()) return std::nullopt;
      return static_cast<int>(as_int(sc.at(key), std::string("scenario.") + key));
    };
    if (sc.contains("num_frames")) g.num_frames = as_int(sc.at("num_frames"), "scenario.num_frames", INT64_MIN, INT64_MAX);
    if (sc.contains("image_hw")) {
      const json& hw = sc.at("image_hw");
      LINGBOT_CHECK(hw.is_array() && hw.size() == 2, "case.json: scenario.image_hw must be [H, W]");
      g.height = as_int(hw.at(0), "scenario.image_hw[0]", INT64_MIN, INT64_MAX);
      g.width = as_int(hw.at(1), "scenario.image_hw[1]", INT64_MIN, INT64_MAX);
    }
    if (sc.contains("flow_threshold") && !sc.at("flow_threshold").is_null())
      g.flow_threshold = sc.at("flow_threshold").get<double>();
    g.max_non_keyframe_gap = opt_int("max_non_keyframe_gap");
    const std::string inference = sc.value("inference", std::string("streaming"));
    LINGBOT_CHECK(inference == "streaming" || inference == "windowed", "case.json: scenario.inference '", inference,
                  "' is not supported (streaming or windowed)");
    g.windowed = inference == "windowed";
    g.window_size = opt_int("window_size");
    g.overlap_size = opt_int("overlap_size");
    g.overlap_keyframes = opt_int("overlap_keyframes");
    LINGBOT_CHECK(!g.windowed || g.window_size, "case.json: scenario.window_size is missing");
    if (c.contains("reference") && c.at("reference").contains("check_windowed")) {
      const json& cw = c.at("reference").at("check_windowed");
      if (cw.contains("flow_rows"))
        for (const json& r : cw.at("flow_rows"))
          g.flow_well_conditioned[{int_or(r, "frame", "reference.check_windowed.flow_rows[].", -1, INT64_MIN, INT64_MAX),
                                   int_or(r, "window", "reference.check_windowed.flow_rows[].", 0, INT64_MIN, INT64_MAX)}] =
              r.value("well_conditioned", true);
    }
    return g;
  } catch (const json::exception& e) {
    throw Error(detail::concat(label, ": ", e.what()));
  }
}

}  // namespace lingbot
