#pragma once
// RowsView: a read-only view of `rows` vectors of `cols` floats, `row_stride` floats apart.
// The heads read their inputs through it straight from the aggregator's output buffers, e.g. the
// camera tokens of n frames (row_stride = tokens_per_frame · 2C) or one frame's patch tokens
// (the rows after its 6 special tokens, row_stride = 2C). The viewed memory is borrowed.
#include <cstdint>

namespace lingbot::model {

struct RowsView {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;  // floats between row r and r+1; 0 means packed (= cols)

  int64_t stride() const { return row_stride ? row_stride : cols; }
  const float* row(int64_t r) const { return data + r * stride(); }
};

}  // namespace lingbot::model
