#pragma once
// Test fixture: the tiny golden model (testdata/tiny) and its 10 input frames, loaded once per suite.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "io/safetensors.h"
#include "lingbot/model.h"
#include "lingbot/session.h"

namespace lingbot::test {

class TinyModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = std::string(LINGBOT_TESTDATA_DIR) + "/tiny/";
    model_ = Model::load(dir + "weights.safetensors");
    images_ = std::make_unique<Tensor>(
        io::SafetensorsReader::open(dir + "reference.safetensors").read("images", DType::F32));
  }
  static void TearDownTestSuite() {
    images_.reset();
    model_.reset();
  }
  // Frame i as f32 [3, H, W].
  static Tensor frame(int64_t i) {
    const int64_t n = 3 * images_->dim(2) * images_->dim(3);
    Tensor t({3, images_->dim(2), images_->dim(3)});
    std::memcpy(t.f32(), images_->f32() + i * n, static_cast<size_t>(n) * sizeof(float));
    return t;
  }
  static int64_t frames() { return images_->dim(0); }
  // 2 scale frames and a KV window of 3 on one thread: the 10 frames fill the cache and evict.
  static SessionOptions short_window_options() {
    SessionOptions o;
    o.scale_frames = 2;
    o.kv_window = 3;
    o.threads = 1;
    o.keep_features = false;
    return o;
  }
  static inline std::shared_ptr<const Model> model_;
  static inline std::unique_ptr<Tensor> images_;
};

}  // namespace lingbot::test
