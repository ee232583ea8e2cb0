#pragma once
// State dictionaries: the name -> tensor maps a checkpoint holds (a PyTorch state_dict), as
// Model::from_weights takes them and ModelConfig::infer / validate read them.
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "lingbot/tensor.h"

namespace lingbot::io {

// Names are the checkpoint's keys ("aggregator.frame_blocks.0.attn.qkv.weight"); ordered by name.
// std::less<> allows lookups with std::string_view without a temporary string. The map owns its
// tensors (which may borrow a memory-mapped file, see Tensor::borrow).
using TensorMap = std::map<std::string, Tensor, std::less<>>;

// Element types a checkpoint file may store. Float types map onto lingbot::DType (F64 is narrowed
// to F32 when read); integer and bool types are never weights.
enum class StorageDType : uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U8, Bool };

// What a file says about one tensor without reading its data: an index of a checkpoint lets the
// configuration be inferred and validated before (or without) loading any weight.
struct TensorInfo {
  StorageDType dtype = StorageDType::F32;
  Shape shape;
};
using TensorInfoMap = std::map<std::string, TensorInfo, std::less<>>;

}  // namespace lingbot::io
