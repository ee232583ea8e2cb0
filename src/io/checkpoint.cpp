#include "io/checkpoint.h"

#include "core/error.h"
#include "io/safetensors.h"
#include "io/torch_checkpoint.h"
#include "io/zip_archive.h"

namespace lingbot::io {

std::string_view checkpoint_format_name(CheckpointFormat f) {
  return f == CheckpointFormat::Safetensors ? "safetensors" : "pytorch";
}

CheckpointFormat sniff_checkpoint_format(const ByteSource& s) {
  LINGBOT_CHECK(s.size() > 0, s.label(), ": file is empty");
  if (looks_like_zip(s)) return CheckpointFormat::Torch;
  if (s.size() >= 9) {
    uint8_t b[9];
    s.read_at(0, b, 9);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
    // A header that starts as JSON with a plausible length: safetensors (its reader says what is
    // wrong when the file is cut inside the header or its data).
    if (b[8] == '{' && n >= 2 && n <= kSafetensorsMaxHeaderBytes) return CheckpointFormat::Safetensors;
  }
  uint8_t b0 = 0;
  s.read_at(0, &b0, 1);
  if (b0 == 0x80) return CheckpointFormat::Torch;  // legacy torch pickle: the torch reader explains
  throw Error(detail::concat(s.label(), ": unrecognised checkpoint format (neither a PyTorch zip checkpoint nor safetensors)"));
}

Checkpoint load_checkpoint(std::unique_ptr<ByteSource> source, std::optional<DType> as) {
  Checkpoint c;
  c.file_bytes = source->size();
  c.format = sniff_checkpoint_format(*source);
  if (c.format == CheckpointFormat::Safetensors) {
    SafetensorsReader r(std::move(source));
    c.tensors = r.read_all(as, &c.int_tensors);
  } else {
    TorchCheckpoint t = load_torch_checkpoint(std::move(source), as);
    c.tensors = std::move(t.tensors);
    c.int_tensors = std::move(t.int_tensors);
    c.location = std::move(t.location);
  }
  return c;
}

CheckpointIndex index_checkpoint(const std::string& path) {
  auto source = ByteSource::open_file(path);
  CheckpointIndex c;
  c.file_bytes = source->size();
  c.format = sniff_checkpoint_format(*source);
  if (c.format == CheckpointFormat::Safetensors) {
    SafetensorsReader r(std::move(source));
    for (const auto& e : r.entries()) c.tensors.emplace(e.name, TensorInfo{e.dtype, e.shape});
  } else {
    TorchIndex t = index_torch_checkpoint(std::move(source));
    c.tensors = std::move(t.tensors);
    c.location = std::move(t.location);
  }
  return c;
}

Checkpoint load_checkpoint(const std::string& path, std::optional<DType> as, CheckpointAccess access) {
  return load_checkpoint(access == CheckpointAccess::Map ? ByteSource::map_file(path) : ByteSource::open_file(path), as);
}

}  // namespace lingbot::io
