#pragma once
// The per-frame head outputs a verify report compares (VerifyReport entry names), camera first.

namespace lingbot_test {

inline constexpr const char* kHeadTensors[] = {"pose_enc", "pose_enc_iters", "extrinsic",  "intrinsic",
                                               "extrinsic_c2w", "depth",      "depth_conf", "world_points"};

}  // namespace lingbot_test
