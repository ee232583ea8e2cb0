// libFuzzer target: the golden-case reader (bench/harness/golden_case.h parse_case_json): case.json text ->
// scenario, model overrides and weights file; then the overrides applied to a model configuration
// as Model::load would (ModelConfig::set + check).
#include <string_view>

#include "fuzz_util.h"
#include "lingbot/model_config.h"
#include "bench/harness/golden_case.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lingbot_fuzz::expect_only_lingbot_errors([&] {
    const lingbot::GoldenCase c =
        lingbot::parse_case_json(std::string_view(reinterpret_cast<const char*>(data), size), "case.json");
    lingbot::ModelConfig cfg = lingbot::ModelConfig::release();
    for (const auto& [key, value] : c.overrides) cfg.set(key, value);
    cfg.check();
  });
  return 0;
}
