#pragma once
// lingbot_map.Result: one frame's outputs as NumPy arrays, and the pairing of engine results with the
// frames pushed (their source, timestamp and model input).
#include <pybind11/pybind11.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "io/image.h"
#include "io/preprocess.h"
#include "io/timestamp_unit.h"
#include "lingbot/session.h"
#include "lingbot/tensor.h"

namespace lingbot::python {

namespace py = pybind11;

// One frame's outputs; every array owns its memory (see arrays.h).
struct PyResult {
  int64_t frame_index = 0;
  bool is_keyframe = false;
  FrameType frame_type = FrameType::Scale;
  double flow = -1.0;
  int64_t rope_time_index = 0;
  int64_t window_index = 0;  // windowed mode: the window the result comes from (FrameResult::window_index)
  std::string source;
  double timestamp = 0;
  io::TimestampUnit timestamp_unit = io::TimestampUnit::FrameIndex;  // for the exports (viewer: seconds or not)
  int64_t scale_frames = 0;  // of the session that produced it (ExportRun::scale_frames)
  py::object pose_enc, pose_enc_iters, c2w, w2c, K, depth, conf, world_points, image, patch_tokens;
  py::list features;
  std::optional<io::PixelRect> content;  // the pixels of `image` from the picture (io::content_rect); nullopt: all
  std::optional<io::SourcePlacement> placement;  // where the picture lies on `image`; nullopt: a float32 model input


  // Pickled by value (multiprocessing queues, joblib): every field, the arrays as NumPy pickles them.
  // setstate raises ValueError for a tuple that is not one of this version's (a pickle can hold anything).
  py::tuple getstate() const;
  static PyResult setstate(const py::tuple& t);

 private:
  static PyResult setstate_checked(const py::tuple& t);
};

// A frame pushed whose result has not come back yet (scale phase).
struct Pending {
  int64_t index = 0;
  std::string source;
  double timestamp = 0;
  io::TimestampUnit timestamp_unit = io::TimestampUnit::FrameIndex;
  Tensor image;  // the model input [3, H, W]
  std::optional<io::PixelRect> content;  // preprocessed here: io::content_rect; a model input given as it is: nullopt
  std::optional<io::SourcePlacement> placement;  // likewise: io::place_on_frame
};

// Pairs each engine result with its pending input, popped from the front of `pending` (needs the GIL:
// builds arrays). `scale_frames` of the session that produced them.
std::vector<PyResult> to_python(std::vector<FrameResult>&& results, std::deque<Pending>* pending, int scale_frames);

}  // namespace lingbot::python
