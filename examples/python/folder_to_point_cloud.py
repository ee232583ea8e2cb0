#!/usr/bin/env python3
"""Image folder (or video) -> coloured point cloud, camera poses and depth maps, from Python.

Writes the files `lingbot-map run` writes (points.ply, poses.json, trajectory.tum, depth/, ...;
--export all adds NPZ, COLMAP, GLB) into --out through lingbot_map.Exporter, and prints one line per frame. With --show, opens the point
cloud in Open3D (python3-open3d) when it is installed.

  PYTHONPATH=build/python python3 examples/python/folder_to_point_cloud.py \\
      --images testdata/tiny/frames --model testdata/tiny/model.pt --image-size 112 \\
      --scale-frames 2 --kv-window 3 --out cloud-out
  # the real model: --images my_frames/ --model lingbot-map-long.pt --out cloud-out
"""
import argparse
import pathlib
import sys
import time

import numpy as np

import lingbot_map as lm


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--images", type=pathlib.Path, help="folder of frames (.jpg .jpeg .png .bmp, sorted by name)")
    src.add_argument("--video", type=pathlib.Path, help="video file")
    ap.add_argument("--model", required=True, help="checkpoint (.pt / .safetensors)")
    ap.add_argument("--out", type=pathlib.Path, required=True, help="output folder")
    ap.add_argument("--image-size", type=int, default=518)
    ap.add_argument("--fps", type=float, help="--video: sampling rate (default 10; <= 0: every frame)")
    ap.add_argument("--scale-frames", type=int, default=8)
    ap.add_argument("--kv-window", type=int, default=64)
    ap.add_argument("--keyframe-interval", default="auto", help="'auto', 'flow' or an interval (run's option)")
    ap.add_argument("--mode", choices=["streaming", "windowed"], default="streaming",
                    help="run's --mode: one stream, or overlapping windows aligned by Sim(3) (long sequences)")
    ap.add_argument("--window-size", type=int, help="--mode windowed: stored frames per window (default 64)")
    ap.add_argument("--overlap-size", type=int, help="--mode windowed: frames shared by consecutive windows (default 16)")
    ap.add_argument("--conf-threshold", type=float, default=1.5)
    ap.add_argument("--downsample", type=int, default=10)
    ap.add_argument("--export", default=lm.default_exports(),
                    help="comma list of run's exports ('all' = every kind: " + ", ".join(k["name"] for k in lm.export_kinds()) + ")")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0 = all cores, as run)")
    ap.add_argument("--show", action="store_true", help="open the cloud in Open3D at the end")
    args = ap.parse_args(argv)

    model = lm.Model.load(args.model)
    interval = int(args.keyframe_interval) if args.keyframe_interval.isdigit() else args.keyframe_interval
    extra = dict(window_size=args.window_size, overlap_size=args.overlap_size) if args.mode == "windowed" else {}
    if args.fps is not None:
        if args.video is None:
            ap.error("--fps applies to --video only")
        extra["fps"] = args.fps
    frames = lm.reconstruct(images=args.images, video=args.video, model=model, image_size=args.image_size,
                            scale_frames=args.scale_frames, kv_window=args.kv_window,
                            keyframe_interval=interval, mode=args.mode, threads=args.threads, **extra)
    w, h = frames.image_size
    print(f"{frames.kind}: {frames.frame_count or 'unknown number of'} frames at {w}x{h}, {args.mode}, "
          f"keyframes {frames.options['keyframe_policy']}")
    t0 = time.monotonic()
    points = 0

    def write(r) -> None:
        nonlocal points
        exporter.write(r)
        xyz, _ = lm.select_points(r.world_points, r.image, r.conf, r.depth,
                                  conf_threshold=args.conf_threshold, downsample=args.downsample)
        points += len(xyz)
        centre = r.c2w[:, 3]
        print(f"frame {r.frame_index:4d} {r.source:>16s}  camera at ({centre[0]:+.3f}, {centre[1]:+.3f}, "
              f"{centre[2]:+.3f})  depth {np.median(r.depth):.3f} (median)  {len(xyz)} points"
              f"{'  keyframe' if r.is_keyframe else ''}"
              f"{f'  window {r.window_index}' if args.mode == 'windowed' else ''}", flush=True)

    try:
        with lm.Exporter(args.out, export=args.export,
                         conf_threshold=args.conf_threshold, downsample=args.downsample,
                         meta={"model": str(args.model), "demo": False}) as exporter:
            try:
                for r in frames:
                    write(r)
            except KeyboardInterrupt:
                for r in frames.finish_early():  # windowed: the rows computed and held back for the overlap
                    write(r)
                raise  # the with-block closes the exports: complete for every frame written
    except KeyboardInterrupt:
        print("interrupted: the files hold every frame completed so far", file=sys.stderr)
    print(f"{points} points, {time.monotonic() - t0:.1f} s; wrote {args.out / 'points.ply'}")
    if args.show:
        try:
            import open3d as o3d
        except ImportError:
            print("--show needs Open3D (apt-get install python3-open3d)", file=sys.stderr)
            return 1
        o3d.visualization.draw_geometries([o3d.io.read_point_cloud(str(args.out / "points.ply"))])
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (lm.Error, ValueError) as e:  # the engine's errors, and option values it refuses
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
