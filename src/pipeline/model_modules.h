#pragma once
// The modules of a loaded Model, for the streaming session that runs them: internal types, so not
// part of the public Model (include/lingbot/model.h).
#include "lingbot/model.h"

namespace lingbot {

namespace model {
class Encoder;
class Aggregator;
class CameraHead;
class DptHead;
}  // namespace model

struct ModelModules {
  static const model::Encoder& encoder(const Model& m);
  static const model::Aggregator& aggregator(const Model& m);
  static const model::CameraHead& camera_head(const Model& m);
  static const model::DptHead& dpt_head(const Model& m);
};

}  // namespace lingbot
