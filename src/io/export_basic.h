#pragma once
// The run's own formats behind the Exporter interface (io/export.h): poses.json, trajectory.tum,
// depth/ (16-bit PNG + float32 NPY per frame) and points.ply. The files are described in
// io/writers.h, which does the writing.
#include <filesystem>
#include <memory>

#include "io/export.h"

namespace lingbot::io {

std::unique_ptr<Exporter> make_poses_exporter();  // "poses": poses.json, every frame (non-finite values as null)
std::unique_ptr<Exporter> make_tum_exporter();    // "tum": trajectory.tum, frames with finite geometry
std::unique_ptr<Exporter> make_depth_exporter();  // "depth": depth/NNNNNN{.png,.npy,_conf.png,_conf.npy}
std::unique_ptr<Exporter> make_ply_exporter();    // "ply": points.ply (frame_points of every frame)

void remove_poses_outputs(const std::filesystem::path& out_dir);
void remove_tum_outputs(const std::filesystem::path& out_dir);
void remove_depth_outputs(const std::filesystem::path& out_dir);
void remove_ply_outputs(const std::filesystem::path& out_dir);

// NNNNNN.png / .npy / _conf.png / _conf.npy: the names write_depth_frame gives.
bool is_depth_file_name(const std::string& name);

}  // namespace lingbot::io
