#include <cstdio>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "lingbot/session.h"
#include "bench/harness/verify.h"
#include "pipeline/session_backend.h"

namespace lingbot::cli {

void add_verify_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("verify", "Run a golden case through the streaming Session and compare with its reference");
  struct Args {
    std::string case_dir, kv_backend = "paged", kv_dtype = "f32", weights_dtype = "f32", only, device = "cpu";
    int threads = 0;
    RenamedOptions renamed;  // --backend (old spelling)
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--golden", args->case_dir, "case directory (case.json, weights, reference.safetensors)")->required();
  args->renamed.add(cmd, cmd->add_option("--kv-backend", args->kv_backend, "KV cache backend: paged | dense | dense-full")
                             ->check(one_of({"paged", "dense", "dense-full"}, "paged, dense or dense-full"))
                             ->capture_default_str(), "--kv-backend", "--backend", args->kv_backend);
  cmd->add_option("--kv-dtype", args->kv_dtype, "KV cache storage dtype: f32 | f16 | bf16")
      ->check(one_of({"f32", "f16", "bf16"}, "f32, f16 or bf16"))
      ->capture_default_str();
  cmd->add_option("--weights-dtype", args->weights_dtype,
                  "storage dtype of the blocks' linear layers and the DPT convolutions: auto | f32 | f16 | bf16 (tolerances scale with it)")
      ->check(one_of({"auto", "f32", "f16", "bf16"}, "auto, f32, f16 or bf16"))
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "OpenMP threads (0 = all)")->capture_default_str();
  cmd->add_option("--device", args->device, "where the model runs: cpu | cuda | auto (as run --device)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  cmd->add_option("--only", args->only,
                  "comma-separated glob patterns: check only these tensors (others are listed as SKIP)");
  cmd->callback([args] {
    args->renamed.resolve();
    VerifyOptions o;
    o.case_dir = args->case_dir;
    o.kv_backend = parse_choice("--kv-backend", [&] { return parse_kv_backend(args->kv_backend); });
    o.kv_dtype = parse_dtype(args->kv_dtype);
    LINGBOT_CHECK(args->threads >= 0 && args->threads <= kMaxThreads, "--threads must be in 0..", kMaxThreads,
                  " (0 = all cores), got ", args->threads);
    o.threads = args->threads;
    o.device = cli::resolve_device_option(args->device);
    const WeightsDtypeForDevice wd = parse_weights_dtype(args->weights_dtype, o.device);
    if (!wd.notice.empty()) std::printf("%s\n", wd.notice.c_str());
    if (!wd.rule.empty()) std::printf("weights dtype %s\n", wd.rule.c_str());
    o.weights_dtype = wd.dtype;
    for (size_t start = 0; !args->only.empty() && start <= args->only.size();) {
      const size_t comma = args->only.find(',', start);
      const std::string pat = args->only.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!pat.empty()) o.only.push_back(pat);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    const VerifyReport report = run_verify(o);
    std::fputs(format_verify_report(report).c_str(), stdout);
    if (!report.passed() && o.kv_backend == KVBackend::DenseFull)
      std::printf("note: dense-full never evicts, so it matches only cases whose stored frames all fit their KV "
                  "window; the reference evicts past it (use paged or dense)\n");
    if (!report.passed()) throw CLI::RuntimeError(1);
  });
}

}  // namespace lingbot::cli
