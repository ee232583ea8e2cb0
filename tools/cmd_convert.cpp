// `lingbot-map convert IN OUT.safetensors [--dtype f32|f16|bf16]`: rewrites any supported checkpoint
// as safetensors (the state dict only), optionally converting float tensors. Float tensors are
// converted while reading; the writer streams tensor by tensor.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/file_util.h"
#include "io/safetensors.h"

namespace lingbot::cli {

namespace {

struct ConvertOptions {
  std::string in, out, dtype;
};

// Narrows widened integer values back to their stored width for writing.
std::vector<uint8_t> pack_ints(const io::IntTensor& t) {
  const size_t es = io::storage_dtype_size(t.dtype);
  std::vector<uint8_t> out(t.values.size() * es);
  for (size_t i = 0; i < t.values.size(); ++i) std::memcpy(out.data() + i * es, &t.values[i], es);  // little-endian
  return out;
}

void run_convert(const ConvertOptions& o) {
  std::optional<DType> as;
  if (!o.dtype.empty()) as = parse_dtype(o.dtype);
  LINGBOT_CHECK(o.in != o.out, "convert: output path is the input path '", o.in, "'");
  // The output is safetensors whatever its name; under a PyTorch checkpoint's name, torch.load and
  // other tools would take it for one and fail.
  const std::string ext = std::filesystem::path(o.out).extension().string(), lower = io::lower_extension(o.out);
  LINGBOT_CHECK(lower != ".pt" && lower != ".pth" && lower != ".bin" && lower != ".ckpt",
                "convert: the output is safetensors: '", o.out, "' names a PyTorch checkpoint (", ext,
                "); name it .safetensors");
  // The same file by another name (./x, a link), or the temporary the output is written through.
  const std::filesystem::path target = io::output_file_target(o.out);
  std::error_code ec;
  LINGBOT_CHECK(!std::filesystem::equivalent(o.in, target, ec), "convert: output path '", o.out,
                "' is the input file '", o.in, "'");
  LINGBOT_CHECK(!std::filesystem::equivalent(o.in, io::temp_path(target), ec), "convert: the input '", o.in,
                "' is the temporary file the output is written through: choose another output name");
  io::check_output_file(o.out);
  io::Checkpoint ck = io::load_checkpoint(o.in, as);
  std::vector<io::SafetensorsEntry> entries;
  for (const auto& [name, t] : ck.tensors) entries.push_back({name, io::storage_dtype_of(t.dtype()), t.shape(), t.raw()});
  std::vector<std::vector<uint8_t>> ints;
  ints.reserve(ck.int_tensors.size());
  for (const auto& [name, t] : ck.int_tensors) {
    ints.push_back(pack_ints(t));
    entries.push_back({name, t.dtype, t.shape, ints.back().data()});
  }
  io::write_safetensors(o.out, entries, {{"converted_by", "lingbot-map convert"}});
  std::printf("wrote %s: %zu tensors (%zu float, %zu integer), %s from %s checkpoint %s\n", o.out.c_str(), entries.size(),
              ck.tensors.size(), ck.int_tensors.size(), as ? std::string(dtype_name(*as)).c_str() : "dtypes kept",
              std::string(io::checkpoint_format_name(ck.format)).c_str(), o.in.c_str());
}

}  // namespace

void add_convert_command(CLI::App& app) {
  auto opts = std::make_shared<ConvertOptions>();
  auto* cmd = app.add_subcommand("convert", "Convert a checkpoint (.pt or .safetensors) to safetensors");
  cmd->add_option("input", opts->in, "Input checkpoint (format detected from content)")->required();
  cmd->add_option("output", opts->out, "Output .safetensors path")->required();
  cmd->add_option("--dtype", opts->dtype, "Store float tensors as f32, f16 or bf16 (default: keep each tensor's dtype)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->callback([opts] { run_convert(*opts); });
}

}  // namespace lingbot::cli
