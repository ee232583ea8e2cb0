"""Checks a `lingbot-map run --export ...` output folder with the field's own Python tools.

Run by the C++ CLI tests (tests/cli/run_export_test.cpp) with Debian's /usr/bin/python3:
    check_exports.py OUT_DIR npz|ply ...
  npz: numpy.load opens predictions/frame_*.npz, predictions/meta.npz and predictions.npz; every key
       has its documented shape and dtype, and the values equal what the run wrote elsewhere
       (depth/*.npy, poses.json).
  ply: Open3D reads points.ply with the header's point count (= summary.json "points").
Prints one line per check; any failure raises (exit code 1). A missing module is a failure too.
"""
import json
import os
import re
import sys

import numpy as np


def check_npz(out):
    poses = json.load(open(os.path.join(out, "poses.json")))
    frames = poses["frames"]
    H, W = poses["image_height"], poses["image_width"]
    S = len(frames)
    pdir = os.path.join(out, "predictions")
    files = sorted(f for f in os.listdir(pdir) if re.fullmatch(r"frame_\d{6}\.npz", f))
    assert len(files) == S, (len(files), S)
    shapes = {"images": (3, H, W), "pose_enc": (9,), "depth": (H, W, 1), "depth_conf": (H, W),
              "extrinsic": (3, 4), "intrinsic": (3, 3)}
    per_frame = {k: [] for k in shapes}
    for i, (name, fr) in enumerate(zip(files, frames)):
        assert name == "frame_%06d.npz" % fr["index"], (name, fr["index"])
        z = np.load(os.path.join(pdir, name), allow_pickle=False)
        assert sorted(z.files) == sorted(shapes), z.files
        for k, shp in shapes.items():
            a = z[k]
            assert a.shape == shp and a.dtype == np.float32, (name, k, a.shape, a.dtype)
            per_frame[k].append(a)
        stem = "%06d" % fr["index"]
        depth = np.load(os.path.join(out, "depth", stem + ".npy"))
        conf = np.load(os.path.join(out, "depth", stem + "_conf.npy"))
        assert np.array_equal(z["depth"][..., 0], depth, equal_nan=True), name
        assert np.array_equal(z["depth_conf"], conf, equal_nan=True), name
        c2w = np.array(fr["c2w"], dtype=np.float64)
        w2c = np.array(fr["w2c"], dtype=np.float64)
        K = np.array(fr["intrinsics"], dtype=np.float64)
        assert np.array_equal(z["intrinsic"].astype(np.float64), K), (name, z["intrinsic"], K)
        # extrinsic is world -> camera: its inverse is the c2w of poses.json, and it equals w2c.
        assert np.allclose(z["extrinsic"], w2c, atol=1e-5, rtol=0), name
        e4 = np.vstack([z["extrinsic"].astype(np.float64), [0, 0, 0, 1]])
        assert np.allclose(np.linalg.inv(e4), c2w, atol=1e-5, rtol=0), name
        # pose_enc[0:3] is the camera centre (decoded pose camera -> world).
        assert np.array_equal(z["pose_enc"][:3].astype(np.float64), c2w[:3, 3]), name
        img = z["images"]
        assert img.min() >= 0 and img.max() <= 1, name
    meta = np.load(os.path.join(pdir, "meta.npz"), allow_pickle=False)
    assert sorted(meta.files) == ["frame_type", "is_keyframe"], meta.files
    assert meta["is_keyframe"].dtype == np.bool_ and meta["is_keyframe"].shape == (S,)
    assert meta["frame_type"].dtype == np.uint8 and meta["frame_type"].shape == (S,)
    assert list(meta["is_keyframe"]) == [f["keyframe"] for f in frames]
    assert set(meta["frame_type"].tolist()) <= {0, 1, 2}
    assert all((t != 2) == k for t, k in zip(meta["frame_type"], meta["is_keyframe"]))
    whole = np.load(os.path.join(out, "predictions.npz"), allow_pickle=False)
    assert sorted(whole.files) == sorted(list(shapes) + ["is_keyframe", "frame_type"]), whole.files
    for k, shp in shapes.items():
        a = whole[k]
        assert a.shape == (S,) + shp and a.dtype == np.float32, (k, a.shape, a.dtype)
        assert np.array_equal(a, np.stack(per_frame[k]), equal_nan=True), k
    assert np.array_equal(whole["is_keyframe"], meta["is_keyframe"])
    assert np.array_equal(whole["frame_type"], meta["frame_type"])
    print("npz: %d frames, %d keys per frame, predictions.npz %d keys: OK" % (S, len(shapes), len(whole.files)))


def check_ply(out):
    import open3d as o3d

    path = os.path.join(out, "points.ply")
    head = open(path, "rb").read(4096)
    count = int(re.search(rb"element vertex (\d+)", head).group(1))
    pcd = o3d.io.read_point_cloud(path)
    n = len(pcd.points)
    assert n == count, (n, count)
    assert len(pcd.colors) == n
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["points"] == n, (summary["points"], n)
    assert n > 0
    print("ply: Open3D read %d points (header %d): OK" % (n, count))


if __name__ == "__main__":
    out_dir = sys.argv[1]
    for what in sys.argv[2:]:
        {"npz": check_npz, "ply": check_ply}[what](out_dir)
