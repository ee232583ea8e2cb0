#!/usr/bin/env python3
"""Live reconstruction from a webcam: frames stream into a lingbot_map.Session as they are captured.

Prints each frame's camera position and depth range; with --view, shows the camera image next to a
colour-mapped depth map (OpenCV window); with --out, also writes `lingbot-map run`'s files
(points.ply, poses.json, ...) as frames complete. Ctrl-C (or q in the window) ends the stream after
the frame in flight; the pending scale frames are finished and the files closed. (A live loop
catches SIGINT itself so that no completed frame is lost; lingbot_map.reconstruct() instead raises
KeyboardInterrupt at the next frame boundary.)

Camera capture uses OpenCV (apt-get install python3-opencv, or pip install opencv-python).
--camera demo uses the engine's generated demo frames instead of a camera (no OpenCV needed).

  PYTHONPATH=build/python python3 examples/python/live_webcam.py --model lingbot-map-long.pt --camera 0
  PYTHONPATH=build/python python3 examples/python/live_webcam.py --demo --camera demo --frames 12
"""
import argparse
import pathlib
import signal
import sys
import time

import numpy as np

import lingbot_map as lm


def camera_frames(camera: str, limit: int):
    """uint8 RGB [H, W, 3] frames from a camera index / device / URL, or the demo sequence."""
    if camera == "demo":
        for i in range(limit if limit > 0 else 10**9):
            yield lm.demo_frame(i)
        return
    try:
        import cv2
    except ImportError:
        raise SystemExit("error: camera capture needs OpenCV (apt-get install python3-opencv); "
                         "--camera demo runs without a camera")
    cap = cv2.VideoCapture(int(camera) if camera.isdigit() else camera)
    if not cap.isOpened():
        raise SystemExit(f"error: cannot open camera {camera}")
    try:
        n = 0
        while limit <= 0 or n < limit:
            ok, bgr = cap.read()
            if not ok:
                break
            n += 1
            yield np.ascontiguousarray(bgr[:, :, ::-1])  # OpenCV delivers BGR
    finally:
        cap.release()


def show(r) -> bool:
    """Camera image | depth map in one OpenCV window; False when the user pressed q."""
    import cv2
    d = r.depth
    norm = ((d - d.min()) / max(float(d.max() - d.min()), 1e-9) * 255).astype(np.uint8)
    depth_bgr = cv2.applyColorMap(norm, cv2.COLORMAP_TURBO)
    img = (np.transpose(r.image, (1, 2, 0))[:, :, ::-1] * 255).round().astype(np.uint8)
    cv2.imshow("lingbot-map: input | depth", np.hstack([img, depth_bgr]))
    return (cv2.waitKey(1) & 0xFF) != ord("q")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    m = ap.add_mutually_exclusive_group(required=True)
    m.add_argument("--model", help="checkpoint (.pt / .safetensors)")
    m.add_argument("--demo", action="store_true", help="built-in random-weight model (meaningless geometry)")
    ap.add_argument("--camera", default="0", help="camera index, device path or stream URL; 'demo' = generated frames")
    ap.add_argument("--frames", type=int, default=0, help="stop after N frames (0 = until Ctrl-C)")
    ap.add_argument("--image-size", type=int, default=None,
                    help="preprocess frames as `run` does (default 518; 112 with --demo)")
    ap.add_argument("--scale-frames", type=int, default=8)
    ap.add_argument("--kv-window", type=int, default=64)
    ap.add_argument("--keyframe-interval", default="auto",
                    help="'auto' (every frame), 'flow' (by camera motion) or an interval (run's option)")
    ap.add_argument("--max-special-frames", type=int, default=256,
                    help="keep the special tokens of only the newest N frames past the window, so memory and "
                         "time per frame stop growing on an endless stream (run's --max-special-frames; "
                         "0 = keep all, as upstream)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0 = all cores, as run)")
    ap.add_argument("--out", type=pathlib.Path, help="also write run's files here")
    ap.add_argument("--view", action="store_true", help="show input and depth in an OpenCV window")
    args = ap.parse_args(argv)

    model = lm.Model.demo() if args.demo else lm.Model.load(args.model)
    image_size = args.image_size or (112 if args.demo else 518)
    keyframes = int(args.keyframe_interval) if args.keyframe_interval.isdigit() else args.keyframe_interval
    exporter = lm.Exporter(args.out, meta={"model": "built-in demo (random weights)" if args.demo else args.model, "demo": args.demo}) if args.out else None
    done = 0
    t0 = time.monotonic()

    def report(results) -> bool:
        nonlocal done
        for r in results:
            if exporter:
                exporter.write(r)
            done += 1
            c = r.c2w[:, 3]
            print(f"frame {r.frame_index:5d}  camera ({c[0]:+.3f}, {c[1]:+.3f}, {c[2]:+.3f})  depth "
                  f"{r.depth.min():.2f}..{r.depth.max():.2f}  {done / (time.monotonic() - t0):.2f} fps since the start", flush=True)
            if args.view and not show(r):
                return False
        return True

    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))  # checked between frames
    with lm.Session(model, scale_frames=args.scale_frames, kv_window=args.kv_window, keyframe_interval=keyframes,
                    image_size=image_size, max_special_frames=args.max_special_frames, threads=args.threads) as session:
        for i, frame in enumerate(camera_frames(args.camera, args.frames)):
            if not report(session.push(frame, source=f"camera_{i}", timestamp=time.monotonic() - t0)) or stop:
                break
        if stop:
            print("stopping (Ctrl-C)", file=sys.stderr)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        report(session.finish())
        print(f"{done} frames; cache {session.stats()['bytes_reserved'] / 2**20:.1f} MiB")
    if exporter:
        exporter.close()
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (lm.Error, ValueError) as e:  # the engine's errors, and option values it refuses
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
