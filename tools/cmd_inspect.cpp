// `lingbot-map inspect MODEL [--manifest FILE.json] [--set key=value ...]`: what a checkpoint holds and
// whether it fits the model. Reads names, dtypes and shapes only (no tensor data), so it is instant
// even for the 4.6 GB release checkpoint. Exit 0 only when every check passes.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "core/memory_stats.h"
#include "io/checkpoint.h"
#include "lingbot/model.h"
#include "lingbot/model_config.h"

namespace lingbot::cli {

namespace {

struct InspectOptions {
  std::string model;
  std::string manifest;
  std::vector<std::string> overrides;
  bool load = false;
};

std::string with_commas(uint64_t n) {
  const std::string digits = std::to_string(n);
  std::string s;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s.push_back(',');
    s.push_back(digits[i]);
  }
  return s;
}

// Key/shape differences between the checkpoint and a manifest ({"tensors": [{"name", "shape"}]}).
std::vector<std::string> manifest_problems(const io::TensorInfoMap& index, const std::string& path) {
  std::ifstream f(path);
  LINGBOT_CHECK(f.good(), "cannot open manifest '", path, "'");
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::concat("manifest '", path, "' is not valid JSON: ", e.what()));
  }
  LINGBOT_CHECK(m.is_object() && m.contains("tensors") && m["tensors"].is_array(), "manifest '", path,
                "' has no \"tensors\" array");
  std::vector<std::string> out;
  std::map<std::string, Shape> want;
  for (const auto& t : m["tensors"]) {
    LINGBOT_CHECK(t.is_object() && t.contains("name") && t["name"].is_string() && t.contains("shape") && t["shape"].is_array(),
                  "manifest '", path, "': every tensor needs a \"name\" and a \"shape\"");
    const std::string name = t["name"].get<std::string>();
    Shape shape;
    for (const auto& d : t["shape"]) {
      LINGBOT_CHECK(d.is_number_integer(), "manifest '", path, "': tensor '", name, "' has a non-integer dimension");
      shape.push_back(d.get<int64_t>());
    }
    if (!want.emplace(name, shape).second) out.push_back("manifest lists " + name + " twice");
  }
  for (const auto& [name, shape] : want) {
    auto it = index.find(name);
    if (it == index.end()) out.push_back("missing " + name + " " + shape_str(shape));
    else if (it->second.shape != shape)
      out.push_back("wrong shape " + name + ": manifest " + shape_str(shape) + ", checkpoint " + shape_str(it->second.shape));
  }
  for (const auto& [name, info] : index)
    if (!want.count(name)) out.push_back("not in manifest " + name + " " + shape_str(info.shape));
  return out;
}

void run_inspect(const InspectOptions& o) {
  const io::CheckpointIndex idx = io::index_checkpoint(o.model);
  // A manifest that cannot be read fails here, before the listing.
  const std::vector<std::string> manifest = o.manifest.empty() ? std::vector<std::string>{}
                                                                : manifest_problems(idx.tensors, o.manifest);
  std::printf("file: %s\n", o.model.c_str());
  std::printf("format: %s%s, %s bytes\n", std::string(io::checkpoint_format_name(idx.format)).c_str(),
              idx.format == io::CheckpointFormat::Torch
                  ? (idx.location.empty() ? " (state dict at top level)" : (" (state dict under '" + idx.location + "')").c_str())
                  : "",
              with_commas(idx.file_bytes).c_str());
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_dtype;  // dtype -> (tensors, bytes)
  uint64_t params = 0;
  for (const auto& [name, info] : idx.tensors) {
    const auto n = static_cast<uint64_t>(io::checked_numel(info.shape, name));
    params += n;
    auto& slot = by_dtype[std::string(io::safetensors_dtype_name(info.dtype))];
    slot.first += 1;
    slot.second += n * io::storage_dtype_size(info.dtype);
  }
  std::printf("tensors: %zu, parameters: %s\n", idx.tensors.size(), with_commas(params).c_str());
  for (const auto& [dtype, v] : by_dtype)
    std::printf("  %-5s %6s tensors %16s bytes\n", dtype.c_str(), with_commas(v.first).c_str(), with_commas(v.second).c_str());

  ModelConfig cfg = ModelConfig::infer(idx.tensors);
  for (const auto& [key, value] : config_overrides(o.overrides)) cfg.set(key, value);
  std::printf("\nconfig (shape-visible fields inferred; heads, iterations, eps, RoPE, KV cache are defaults or --set):\n");
  std::string text = cfg.describe();
  for (size_t p = 0; p < text.size();) {
    const size_t nl = text.find('\n', p);
    std::printf("  %s\n", text.substr(p, nl - p).c_str());
    p = nl + 1;
  }

  size_t failures = 0;
  std::vector<std::string> problems;
  try {
    problems = cfg.problems(idx.tensors);
  } catch (const Error& e) {
    problems.push_back(e.what());
  }
  ModelLoadStats not_run;
  not_run.ignored = modules_not_run(idx.tensors);
  size_t model_keys = idx.tensors.size();
  for (const auto& m : not_run.ignored) model_keys -= static_cast<size_t>(m.tensors);
  if (problems.empty())
    std::printf("\nconfig check: OK (all %zu keys present with the expected shapes)\n", model_keys);
  else
    std::printf("\nconfig check: FAILED (%zu problem(s))\n", problems.size());
  for (const auto& p : problems) std::printf("  %s\n", p.c_str());
  if (!not_run.ignored.empty()) std::printf("%s\n", not_run.ignored_description().c_str());
  failures += problems.size();
  if (!o.manifest.empty()) {
    std::printf("manifest check (%s): %s\n", o.manifest.c_str(), manifest.empty() ? "OK" : "FAILED");
    for (const auto& p : manifest) std::printf("  %s\n", p.c_str());
    failures += manifest.size();
  }
  if (o.load) {
    // Reads every tensor as the engine would; peak RSS shows the file is never held twice.
    const size_t rss_before = current_rss_bytes();
    const auto t0 = std::chrono::steady_clock::now();
    const io::Checkpoint ck = io::load_checkpoint(o.model);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t peak = peak_rss_bytes();
    // The ratio is of what the load added (the process's own memory before it is not the file's).
    const size_t added = peak > rss_before ? peak - rss_before : 0;
    std::printf("load: %zu tensors, %s bytes of tensor data in %.2f s; peak RSS %s bytes, %s more than before the "
                "load = %.3f x file size\n",
                ck.tensors.size() + ck.int_tensors.size(), with_commas(io::total_bytes(ck.tensors)).c_str(), secs,
                with_commas(peak).c_str(), with_commas(added).c_str(),
                static_cast<double>(added) / static_cast<double>(idx.file_bytes));
  }
  std::fflush(stdout);
  LINGBOT_CHECK(failures == 0, o.model, ": ", failures, " problem(s) found by the ", o.manifest.empty() ? "config" : "config and manifest",
                " checks (listed above)");
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto opts = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect", "Show a checkpoint's inferred config, parameter count, dtypes and key problems");
  cmd->add_option("model", opts->model, "Checkpoint (.pt / .pth / .safetensors; format detected from content)")->required();
  cmd->add_option("--manifest", opts->manifest, "JSON manifest ({\"tensors\": [{\"name\", \"shape\"}]}) to check keys/shapes against");
  cmd->add_option("--set", opts->overrides, "Override a config field, key=value (repeatable); see the config listing for keys")
      ->check(key_value());
  cmd->add_flag("--load", opts->load, "Also read every tensor and report load time and peak RSS relative to the file size");
  cmd->callback([opts] { run_inspect(*opts); });
}

}  // namespace lingbot::cli
