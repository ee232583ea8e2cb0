#pragma once
// take_weight: moves one named tensor out of a state_dict map as f32 (or another dtype), checking its shape.
// Used by the heads so a loaded checkpoint is never held twice in memory.
#include <string>

#include "core/error.h"
#include "io/tensor_map.h"
#include "lingbot/tensor.h"

namespace lingbot::model {

// Throws Error("missing weight <name>") or Error("<name>: expected shape [..], got [..]").
// A tensor already stored in `dtype` is taken as it is (no copy).
inline Tensor take_weight(io::TensorMap& weights, const std::string& name, const Shape& shape,
                          DType dtype = DType::F32) {
  auto it = weights.find(name);
  LINGBOT_CHECK(it != weights.end(), "missing weight ", name);
  it->second.check_shape(shape, name);
  Tensor t = std::move(it->second);
  weights.erase(it);
  if (t.dtype() != dtype) t = t.to(dtype);
  return t;
}

}  // namespace lingbot::model
