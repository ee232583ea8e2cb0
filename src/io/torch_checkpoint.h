#pragma once
// PyTorch checkpoint reader (the zip format of torch.save since 1.6: <archive>/data.pkl holds the
// pickled object, <archive>/data/<key> the raw little-endian storages).
//
// The pickle is interpreted by the safe VM of io/pickle.h with an allow-list: _rebuild_tensor_v2 /
// _rebuild_tensor / _rebuild_parameter(_with_state) / _rebuild_from_type_v2, collections.OrderedDict
// and the typed storage classes (Float/Double/Half/BFloat16/Long/Int/Short/Char/Byte/Bool). Anything
// else (argparse.Namespace, optimizer state, ...) stays an inert object and is skipped.
// The state dict is found in {"model": sd}, {"state_dict": sd}, {"model_state_dict": sd},
// {"module": sd} or a bare {name: tensor} dict; a "module." prefix on every key is stripped.
// Each tensor is read straight from its storage entry into its own buffer (contiguous tensors) or
// gathered from the storage span it covers (strided views); no storage is held twice.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/byte_source.h"
#include "io/tensor_map.h"

namespace lingbot::io {

struct TorchCheckpoint {
  TensorMap tensors;        // floating-point entries of the state dict
  IntTensorMap int_tensors; // integer / bool entries (e.g. BatchNorm counters)
  std::string location;     // where the state dict was found: "model", "state_dict", "" (top level)
  bool stripped_module_prefix = false;
};

// Names, dtypes and shapes of the state dict, from the pickle alone (no tensor data is read).
struct TorchIndex {
  TensorInfoMap tensors;
  std::string location;
  bool stripped_module_prefix = false;
};
TorchIndex index_torch_checkpoint(const std::string& path);
TorchIndex index_torch_checkpoint(std::unique_ptr<ByteSource> source);

// Throws Error naming the file and the problem for anything that is not a readable checkpoint.
// `as` converts every float tensor to that dtype while reading.
TorchCheckpoint load_torch_checkpoint(const std::string& path, std::optional<DType> as = std::nullopt);
TorchCheckpoint load_torch_checkpoint(std::unique_ptr<ByteSource> source, std::optional<DType> as = std::nullopt);

}  // namespace lingbot::io
