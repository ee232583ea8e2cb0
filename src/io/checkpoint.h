#pragma once
// load_checkpoint: reads model weights from either a safetensors file or a PyTorch (.pt / .pth)
// checkpoint, chosen by the file's magic bytes, not its extension.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "io/byte_source.h"
#include "io/tensor_map.h"

namespace lingbot::io {

enum class CheckpointFormat { Safetensors, Torch };
std::string_view checkpoint_format_name(CheckpointFormat f);  // "safetensors", "pytorch"

struct Checkpoint {
  CheckpointFormat format = CheckpointFormat::Safetensors;
  TensorMap tensors;         // floating-point tensors (kept in their stored dtype unless converted)
  IntTensorMap int_tensors;  // integer / bool tensors, if any
  std::string location;      // PyTorch: where the state dict was found ("model", "state_dict", "")
  uint64_t file_bytes = 0;
};

// The checkpoint's tensor names, stored dtypes and shapes, read without loading tensor data.
struct CheckpointIndex {
  CheckpointFormat format = CheckpointFormat::Safetensors;
  TensorInfoMap tensors;
  std::string location;
  uint64_t file_bytes = 0;
};
CheckpointIndex index_checkpoint(const std::string& path);

// Throws Error("<file>: unrecognised checkpoint format ...") when the magic matches neither format.
CheckpointFormat sniff_checkpoint_format(const ByteSource& source);

// How load_checkpoint(path) reads tensor data.
enum class CheckpointAccess : uint8_t {
  Read,  // pread into owned buffers (the file can change or go away afterwards)
  Map,   // mmap: tensors kept in their stored dtype borrow the mapping (Tensor::borrowed()); no copy,
         // pages come from the page cache when first touched and are shared between processes
};

// Loads every tensor; `as` converts float tensors to that dtype while reading (converted tensors
// are always owned copies).
Checkpoint load_checkpoint(const std::string& path, std::optional<DType> as = std::nullopt,
                           CheckpointAccess access = CheckpointAccess::Read);
Checkpoint load_checkpoint(std::unique_ptr<ByteSource> source, std::optional<DType> as = std::nullopt);

}  // namespace lingbot::io
