"""reconstruct(): input kinds, run's automatic keyframe interval, input errors (exact messages, raised
before the iterator is returned), the Exporter and select_points against the files run writes."""
import contextlib
import json
import os
import pathlib
import pickle
import shutil
import warnings

import numpy as np
import pytest
from PIL import Image

import lingbot_map as lm
from conftest import ROOT, TINY, TINY_OPTIONS

FRAMES = TINY / "frames"


def test_folder_and_uint8_list_and_float_list_agree(tiny_model):
    folder = list(lm.reconstruct(images=FRAMES, model=tiny_model, **TINY_OPTIONS))
    u8 = [lm.load_image(p) for p in sorted(FRAMES.iterdir())]
    arrays = list(lm.reconstruct(images=u8, model=tiny_model, **TINY_OPTIONS))
    model_inputs = dict(TINY_OPTIONS)
    del model_inputs["image_size"]  # float32 frames are model inputs: no preprocessing to ask for
    f32 = list(lm.reconstruct(images=[r.image for r in folder], model=tiny_model, **model_inputs))
    assert len(folder) == len(arrays) == len(f32) == len(u8) > 0
    for a, b, c in zip(folder, arrays, f32):
        assert a.depth.tobytes() == b.depth.tobytes() == c.depth.tobytes()
        assert a.w2c.tobytes() == b.w2c.tobytes() == c.w2c.tobytes()


def test_selection_options_on_a_folder(tiny_model):
    it = lm.reconstruct(images=FRAMES, model=tiny_model, first_k=7, stride=3, **TINY_OPTIONS)
    assert it.frame_count == 3
    assert repr(it) == f"<lingbot_map.Reconstruction images '{FRAMES}', 3 frames of 112x70 (WxH), 0 returned>"
    assert [r.source for r in it] == ["000000.png", "000003.png", "000006.png"]
    assert repr(it) == f"<lingbot_map.Reconstruction images '{FRAMES}', 3 frames of 112x70 (WxH), 3 returned, finished>"
    rot = lm.reconstruct(images=FRAMES, model=tiny_model, rotate_cw90=True, first_k=2, image_size=70, scale_frames=2)
    assert rot.image_size == (70, 70)  # upright 70x112 frames, width := 70, centre-cropped to 70 rows
    upright = np.ascontiguousarray(np.rot90(lm.load_image(FRAMES / "000000.png"), k=-1))
    np.testing.assert_array_equal(next(rot).image, lm.preprocess(upright, image_size=70))


def test_mixed_sizes_are_padded_to_the_batch_canvas(demo_model):
    frames = [lm.demo_frame(0, width=112, height=70), lm.demo_frame(1, width=112, height=98)]
    with pytest.warns(UserWarning, match=r"^the frames preprocess to 2 sizes \(WxH: 1 at 112x70, 1 at 112x98\)"):
        it = lm.reconstruct(images=frames, model=demo_model, image_size=112, scale_frames=2)
    assert it.image_size == (112, 98)
    first = next(it)
    # upstream's batch padding: white (1.0), centred (14 rows above and below)
    expected = np.pad(lm.preprocess(frames[0], image_size=112), ((0, 0), (14, 14), (0, 0)), constant_values=1.0)
    np.testing.assert_array_equal(first.image, expected)


@pytest.mark.parametrize("n, interval", [(320, 1), (321, 2), (700, 3)])
def test_automatic_keyframe_interval_follows_run(demo_model, n, interval):
    frames = [lm.demo_frame(0)] * n
    it = lm.reconstruct(images=frames, model=demo_model, image_size=112)
    assert it.options["keyframe_interval"] == interval
    assert lm.reconstruct(images=frames, model=demo_model, image_size=112, keyframe_interval=5).options["keyframe_interval"] == 5
    assert lm.Session(demo_model).options["keyframe_interval"] == 1  # an open stream: every frame stored


def test_input_errors_are_raised_before_iterating(demo_model, tmp_path):
    good = [lm.demo_frame(0)]
    cases = [
        (dict(), ValueError, "no input: give images= (a folder or a list of arrays) or video= (a file)"),
        (dict(images=good, video="x.mp4"), ValueError, "give either images= or video=, not both"),
        (dict(images=tmp_path / "nope"), lm.FileNotFound, f"image folder not found: {tmp_path / 'nope'}"),
        (dict(images=tmp_path), lm.Error, f"no images (.jpg, .jpeg, .png, .bmp) in {tmp_path}"),
        (dict(video=tmp_path / "nope.mp4"), lm.FileNotFound, f"video file not found: {tmp_path / 'nope.mp4'}"),
        (dict(images=[]), ValueError, "images is an empty list: give at least one frame"),
        (dict(images=good[0]), ValueError, "images is one frame (uint8 array of shape (70, 112, 3)): images= takes a "
         "folder or a sequence of frames, so pass [frame] (a stack [N, H, W, 3] is a sequence too)"),
        (dict(images=42), TypeError, "images must be a folder path (str, bytes or os.PathLike) or a list of arrays, got int"),
        (dict(images=os.fsencode(tmp_path / "nope")), lm.FileNotFound, f"image folder not found: {tmp_path / 'nope'}"),  # as Model.load
        (dict(images=b"\x89PNG\r\n\x1a\n\x00\x00"), TypeError, "images is not a path: it holds a NUL byte (encoded image or "
         "video data? give a path, or decoded frames as a list of arrays)"),
        (dict(images=[b"\x89PNG"]), TypeError, "images[0] is bytes: images= takes a folder, or a list of decoded frames "
         "(uint8 arrays [H, W, 3]; lingbot_map.load_image(path) decodes a file)"),
        (dict(images=[tmp_path / "a.png"]), TypeError,
         "images[0] is a path: images= takes a folder, or a list of arrays (such as [lingbot_map.load_image(p) for p in paths])"),
        (dict(images=[np.zeros((3, 75, 112), np.float32)]), lm.Error,  # as Session.push
         "images[0]: a float32 model input must be a multiple of the patch size 14 on both sides, got 75x112 (HxW)"),
        (dict(images=[np.zeros((3, 70 + 14, 112), np.float32), np.zeros((3, 98, 112), np.float32)]), lm.Error,
         "float32 model inputs must all have one size: images[0] is 84x112 (HxW), images[1] is 98x112 (HxW)"),
        (dict(images=[np.zeros((3, 84, 112), np.float32), np.full((3, 84, 112), 2, np.float32)]), ValueError,
         "images[1]: float32 values must be RGB in [0, 1] (uint8 / 255), got 2.0 at flat index 0"),
        (dict(video=TINY / "model.pt", fps=float("nan")), ValueError, "fps must be a finite number (<= 0: every frame), got nan"),
        (dict(images=good, fps=5), ValueError, "fps= applies to video= only (a folder or list gives every frame)"),
        (dict(images=good, first_k=1), ValueError,
         "first_k, stride and rotate_cw90 select frames of a folder or video; slice the list instead"),
        (dict(images=good + [np.zeros((3, 70, 112), np.float32)]), TypeError,
         "images mixes uint8 frames (preprocessed here) and float32 frames (model inputs): use one kind"),
        (dict(images=good + [np.zeros((70, 112), np.uint8)]), ValueError,
         "images[1] must be a uint8 array [H, W, 3] (RGB) or a float32 array [3, H, W] (RGB in [0, 1]), "
         "got uint8 array of shape (70, 112)"),
        (dict(images=good, image_size=100), ValueError, "image_size must be a multiple of the model's patch size 14, got 100"),
        (dict(images=good, mode="fit"), ValueError, "mode must be 'streaming' or 'windowed', got 'fit'"),
        (dict(images=good, preprocess="fit"), ValueError, "preprocess must be 'crop' or 'pad', got 'fit'"),
        (dict(images=good, window_size=4), ValueError, "window_size only applies to mode='windowed'"),
        (dict(images=FRAMES, stride=0), ValueError, "stride must be >= 1, got 0"),
        (dict(images=good, scale_frames=1025), ValueError, "scale_frames must be at most 1024, got 1025"),
        (dict(images=good, kv_window=2**21), ValueError, "kv_window must be at most 1048576, got 2097152"),
        (dict(images=good, camera_iterations=65), ValueError, "camera_iterations must be at most 64, got 65"),
        (dict(images=good, threads=5000), ValueError, "threads must be at most 4096, got 5000"),
        (dict(images=good, max_special_frames=2**40), ValueError,
         "max_special_frames must be in 0..1073741824 (0 = keep all), got 1099511627776"),
        (dict(images=good, kv_backend="dense-full", max_special_frames=4), ValueError,
         "max_special_frames does not apply to the dense-full KV backend (it keeps every frame)"),
        (dict(images=good, kv_backend="dense-full", kv_window=8), ValueError,
         "kv_window does not apply to the dense-full KV backend (it keeps every frame)"),
        (dict(images=FRAMES, first_k=2**63), ValueError,
         "first_k must fit in a 64-bit int (-9223372036854775808..9223372036854775807), got 9223372036854775808"),
        (dict(images=good, firstk=3), TypeError,
         "reconstruct() got an unexpected keyword argument 'firstk' (did you mean 'first_k'?)"),
    ]
    for kwargs, exc, message in cases:
        with pytest.raises(exc) as e:
            lm.reconstruct(model=demo_model, **kwargs)
        assert str(e.value) == message, kwargs
    with pytest.raises(TypeError) as e:
        lm.reconstruct(images=good, model=3)
    assert str(e.value) == "model must be a lingbot_map.Model or a checkpoint path, got int"


def test_unreadable_frame_fails_at_its_turn(tiny_model, tmp_path):
    for p in sorted(FRAMES.iterdir())[:3]:
        shutil.copy(p, tmp_path / p.name)
    (tmp_path / "000003.png").write_bytes(b"not a png")
    with pytest.raises(lm.Error) as e:  # sizes are probed up front: a file that is no image fails at once
        lm.reconstruct(images=tmp_path, model=tiny_model, **TINY_OPTIONS)
    assert str(e.value).startswith(f"cannot decode image {tmp_path / '000003.png'}: ")
    # A truncated file has a readable header: it fails when its turn comes, after the frames before it.
    data = (FRAMES / "000003.png").read_bytes()
    (tmp_path / "000003.png").write_bytes(data[: len(data) // 2])
    it = lm.reconstruct(images=tmp_path, model=tiny_model, **TINY_OPTIONS)
    got = [next(it).frame_index for _ in range(3)]
    assert got == [0, 1, 2]
    with pytest.raises(lm.Error) as e:
        next(it)
    assert str(e.value).startswith(f"cannot decode image {tmp_path / '000003.png'}: ")
    with pytest.raises(StopIteration):  # ended, as a generator after an exception: nothing out of step
        next(it)


def read_ply(path):
    data = path.read_bytes()
    end = data.index(b"end_header\n") + len(b"end_header\n")
    header = data[:end].decode()
    n = int(header.split("element vertex")[1].split()[0])
    rec = np.frombuffer(data[end:], dtype=[("xyz", "<f4", 3), ("rgb", "u1", 3)], count=n)
    return rec["xyz"], rec["rgb"]


def test_exporter_points_equal_select_points(tiny_model, tmp_path):
    results = list(lm.reconstruct(images=FRAMES, model=tiny_model, **TINY_OPTIONS))
    with lm.Exporter(tmp_path, conf_threshold=2.0, downsample=3) as ex:
        for r in results:
            ex.write(r)
    xyz, rgb = read_ply(tmp_path / "points.ply")
    sel = [lm.select_points(r.world_points, r.image, r.conf, r.depth, conf_threshold=2.0, downsample=3) for r in results]
    np.testing.assert_array_equal(xyz, np.concatenate([s[0] for s in sel]))
    np.testing.assert_array_equal(rgb, np.concatenate([s[1] for s in sel]))
    assert len(xyz) > 0
    # Every selected point is confident: without the threshold more points are kept.
    assert sum(len(lm.select_points(r.world_points, r.image, downsample=3)[0]) for r in results) > len(xyz)
    with pytest.raises(ValueError) as e:
        lm.Exporter(tmp_path / "c", export="poses,obj")
    assert str(e.value).startswith("unknown export 'obj' (choose from poses, tum, depth, ply, depth-preview, ")
    with pytest.raises(TypeError) as e:
        lm.Exporter(tmp_path / "c", export=[1])
    assert str(e.value) == "export must be names (str), got int"
    # The old spelling exports= (before run's --export was the name) still works, with a DeprecationWarning.
    with pytest.warns(DeprecationWarning, match=r"exports= is deprecated, use export= \(run's --export\)"):
        old = lm.Exporter(tmp_path / "old", exports="poses")
    old.close()
    with pytest.raises(ValueError) as e:
        lm.Exporter(tmp_path / "c", export="poses", exports="poses")
    assert str(e.value) == "give export or its old spelling exports, not both"
    ex2 = lm.Exporter(tmp_path / "b")
    ex2.close()
    with pytest.raises(lm.Error) as e:
        ex2.write(results[0])
    assert str(e.value) == "the Exporter is closed: create a new one"
    with pytest.raises(ValueError) as e:
        lm.Exporter(tmp_path / "c", downsample=0)
    assert str(e.value) == "downsample must be >= 1, got 0"


def test_a_mask_leaves_its_pixels_out_of_every_point_cloud(tiny_model, tmp_path):
    """Exporter.write(mask=): upstream's demo can drop sky points (--mask_sky, with a segmentation model of
    its own); here the caller brings any mask over the model input and every point cloud leaves it out."""
    results = list(lm.reconstruct(images=FRAMES, model=tiny_model, **TINY_OPTIONS))
    H, W = results[0].depth.shape
    sky = np.zeros((H, W), bool)
    sky[: H // 2] = True  # the upper half, as a sky segmenter might say
    clouds = "ply,colmap,glb,viewer"
    with lm.Exporter(tmp_path / "all", export=clouds, downsample=1) as ex:
        for r in results:
            ex.write(r)
    with lm.Exporter(tmp_path / "masked", export=clouds + ",depth", downsample=1) as ex:
        for i, r in enumerate(results):
            ex.write(r, mask=~sky if i % 2 else (~sky).astype(np.uint8) * 7)  # bool, or uint8 nonzero
        report = ex.report()
    xyz, rgb = read_ply(tmp_path / "masked" / "points.ply")
    sel = [lm.select_points(r.world_points, r.image, r.conf, r.depth, downsample=1, mask=~sky) for r in results]
    np.testing.assert_array_equal(xyz, np.concatenate([s[0] for s in sel]))
    np.testing.assert_array_equal(rgb, np.concatenate([s[1] for s in sel]))
    # The masked points are the unmasked run's points from the lower half, in the same order.
    lower = [lm.select_points(r.world_points[H // 2:], r.image[:, H // 2:], r.conf[H // 2:], r.depth[H // 2:], downsample=1)
             for r in results]
    np.testing.assert_array_equal(xyz, np.concatenate([s[0] for s in lower]))
    assert 0 < len(xyz) < len(read_ply(tmp_path / "all" / "points.ply")[0])
    assert {report[k]["points"] for k in clouds.split(",")} == {len(xyz)}  # every cloud, the same points
    for r in results:  # the depth maps stay whole
        np.testing.assert_array_equal(np.load(tmp_path / "masked" / "depth" / f"{r.frame_index:06d}.npy"), r.depth)
    with lm.Exporter(tmp_path / "bad", export="ply") as ex:
        with pytest.raises(TypeError) as e:
            ex.write(results[0], mask=sky.astype(np.float32))
        assert str(e.value) == ("mask must be a bool or uint8 array (nonzero: the pixel may give a point), got float32 "
                                f"array of shape ({H}, {W})")
        with pytest.raises(ValueError) as e:
            ex.write(results[0], mask=sky[1:])
        assert str(e.value) == f"mask must have shape ({H}, {W}), got bool array of shape ({H - 1}, {W})"
        assert ex.frames == 0  # refused before anything was written


def test_image_helpers(tmp_path):
    img = lm.load_image(FRAMES / "000000.png")
    assert img.dtype == np.uint8 and img.shape == (70, 112, 3)
    pre = lm.preprocess(img, image_size=112)
    np.testing.assert_array_equal(pre, img.transpose(2, 0, 1).astype(np.float32) / np.float32(255))
    padded = lm.preprocess(img, image_size=224, preprocess="pad")
    assert padded.shape == (3, 224, 224) and padded[:, 0, 0].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(FileNotFoundError) as e:  # lm.FileNotFound: as open() would raise
        lm.load_image(tmp_path / "none.png")
    assert isinstance(e.value, lm.Error)
    assert str(e.value) == f"image file not found: {tmp_path / 'none.png'}"
    # Every refusal offers only what preprocess takes (a float32 [H, W, 3] was told to try [3, H, W],
    # which was then refused too).
    for bad, error, got in ((pre, TypeError, "float32 array of shape (3, 70, 112)"),
                            (img.transpose(2, 0, 1).astype(np.float32) / 255, TypeError, "float32 array of shape (3, 70, 112)"),
                            (img.astype(np.float32).copy(), TypeError,
                             "float32 array of shape (70, 112, 3) (a float picture: convert it to uint8, values 0..255)"),
                            (img[..., 0].copy(), ValueError, "uint8 array of shape (70, 112)")):
        with pytest.raises(error) as e:
            lm.preprocess(bad)
        assert str(e.value) == f"image must be a uint8 array [H, W, 3] (RGB: preprocessing works on 8-bit pictures), got {got}"
    for patch in (0, -14):  # 0 was a division by zero (SIGFPE) before the range check
        with pytest.raises(ValueError) as e:
            lm.preprocess(img, 112, "crop", patch)
        assert str(e.value) == f"patch_size must be in 1..4096, got {patch}"


def test_a_damaged_video_warns_and_reports_its_damage(demo_model):
    """run exits 3 on a damaged video (unless --allow-damaged); reconstruct() yields the frames that
    decoded, then says so with a RuntimeWarning, and .damage has the counts. The input is the fuzz
    finding of 2026-12-04 (1x5376 MPEG-4 frames with decode errors, frames lost and concealed)."""
    video = ROOT / "fuzz" / "corpus" / "fuzz_video" / "regression_one_pixel_wide.m4v"
    it = lm.reconstruct(video=video, model=demo_model, image_size=112, scale_frames=2, fps=0)
    with pytest.warns(RuntimeWarning) as w:
        results = list(it)
    assert len(results) >= 1 and [r.frame_index for r in results] == list(range(len(results)))
    d = it.damage
    assert set(d) == {"decode_errors", "lost_frames", "damaged_frames", "truncated", "description"}
    assert d["decode_errors"] >= 1 and d["description"]  # exact counts: FFmpeg's (C++ tests pin ours)
    assert [str(x.message) for x in w] == [
        f"the input video is damaged ({d['description']}); the frames that decoded were returned "
        "(Reconstruction.damage has the counts)"]
    # Warnings as errors: the exception comes after the last frame, even when every result is one of
    # the scale phase's (returned by finish(), here scale_frames > the frames decoded).
    got = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning):
            for r in lm.reconstruct(video=video, model=demo_model, image_size=112, scale_frames=8, fps=0):
                got.append(r.frame_index)
    assert got == list(range(len(results)))
    clean = lm.reconstruct(images=[lm.demo_frame(i) for i in range(3)], model=demo_model, scale_frames=2)
    assert len(list(clean)) == 3 and clean.damage is None


def test_a_jpeg_with_corrupt_data_is_reported_where_pillow_is_silent(demo_model, tmp_path):
    """libjpeg repairs a JPEG whose scan data was lost (grey blocks) and Pillow hands the picture over
    without a word; load_image gives Pillow's pixels and a RuntimeWarning, and reconstruct() counts
    the frame as damaged, as run does (exit 3 there)."""
    rng = np.random.default_rng(0)
    picture = Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8))
    picture.save(tmp_path / "good.jpg", quality=90)
    data = (tmp_path / "good.jpg").read_bytes()
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(3):
        (folder / f"f{i}.jpg").write_bytes(data[: len(data) * 3 // 4] + b"\xff\xd9" if i == 1 else data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pillow = np.asarray(Image.open(folder / "f1.jpg").convert("RGB"))  # silent
        assert lm.load_image(folder / "f0.jpg").shape == (48, 64, 3)  # intact: silent too
    problem = "Corrupt JPEG data: premature end of data segment"
    with pytest.warns(RuntimeWarning) as w:
        ours = lm.load_image(folder / "f1.jpg")
    np.testing.assert_array_equal(ours, pillow)
    assert [str(x.message) for x in w] == [f"{folder / 'f1.jpg'}: decoded with corrupt data (libjpeg: {problem}; 1 warning)"]

    it = lm.reconstruct(images=folder, model=demo_model, image_size=112, scale_frames=2)
    with pytest.warns(RuntimeWarning) as w:
        assert [r.frame_index for r in it] == [0, 1, 2]
    what = f"1 frame decoded with errors (positions 1; f1.jpg: {problem})"
    assert it.damage == {"decode_errors": 0, "lost_frames": 0, "damaged_frames": 1, "truncated": False,
                         "description": what}
    assert [str(x.message) for x in w] == [
        f"the input images are damaged ({what}); libjpeg concealed the lost data in those frames, which were "
        "returned as decoded (Reconstruction.damage has the counts)"]


def test_exporter_refuses_frames_out_of_order_before_writing(demo_model, tmp_path):
    results = list(lm.reconstruct(images=[lm.demo_frame(i) for i in range(4)], model=demo_model, scale_frames=2))
    with lm.Exporter(tmp_path / "all", export="poses,tum,viewer") as ex:
        for r in results:
            ex.write(r)
        with pytest.raises(lm.Error) as e:
            ex.write(results[0])
        assert str(e.value) == "frames must be written in order 0, 1, 2, ... with the viewer export: got frame 0, expected 4"
        assert ex.frames == 4
    poses = json.loads((tmp_path / "all" / "poses.json").read_text())
    assert [f["index"] for f in poses["frames"]] == [0, 1, 2, 3]
    assert len((tmp_path / "all" / "trajectory.tum").read_text().splitlines()) == 4
    # Without the viewer a subset may be written (every other frame), in increasing order only.
    with lm.Exporter(tmp_path / "subset", export="poses,tum") as ex:
        ex.write(results[0])
        ex.write(results[2])
        with pytest.raises(lm.Error) as e:
            ex.write(results[1])
        assert str(e.value) == "frames must be written in increasing order: got frame 1 after frame 2"
    poses = json.loads((tmp_path / "subset" / "poses.json").read_text())
    assert [f["index"] for f in poses["frames"]] == [0, 2]


def test_exporter_and_select_points_check_values_and_shapes(demo_model, tmp_path):
    r = lm.reconstruct(images=[lm.demo_frame(0)], model=demo_model, scale_frames=1).__next__()
    with pytest.raises(ValueError) as e:
        lm.Exporter(tmp_path / "a", conf_threshold=float("nan"))
    assert str(e.value) == "conf_threshold must be a finite number, got nan"
    with pytest.raises(ValueError) as e:  # json.dumps(allow_nan=False): NaN is not JSON
        lm.Exporter(tmp_path / "b", meta={"x": float("nan")})
    assert str(e.value).startswith("meta: Out of range float values are not JSON compliant")  # (Python 3.13+: ": nan")
    with pytest.raises(TypeError) as e:
        lm.Exporter(tmp_path / "b", meta={"x": {1, 2}})
    assert str(e.value) == "meta: Object of type set is not JSON serializable"
    # NumPy values (a float32 scale, an int64 count, an array) are written as numbers and lists.
    with lm.Exporter(tmp_path / "n", export="poses", meta={"s": np.float32(0.5), "n": np.int64(3),
                                                             "v": np.arange(3, dtype=np.float64)}) as ex:
        ex.write(r)
    poses = json.loads((tmp_path / "n" / "poses.json").read_text())
    assert (poses["s"], poses["n"], poses["v"]) == (0.5, 3, [0.0, 1.0, 2.0])
    hwc = np.ascontiguousarray(r.image.transpose(1, 2, 0))
    with pytest.raises(ValueError) as e:
        lm.select_points(r.world_points, hwc)
    h, w = r.depth.shape
    assert str(e.value) == f"image must have shape (3, {h}, {w}), got float32 array of shape ({h}, {w}, 3)"
    with pytest.raises(ValueError) as e:
        lm.select_points(r.world_points, r.image, conf=np.ascontiguousarray(r.conf.T))
    assert str(e.value) == f"conf must have shape ({h}, {w}), got float32 array of shape ({w}, {h})"


def test_load_safetensors_keeps_empty_tensors(tmp_path):
    header = json.dumps({"empty": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]},
                         "one": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    path = tmp_path / "t.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + np.float32(2.5).tobytes())
    t = lm.load_safetensors(path)
    assert t["empty"].shape == (0, 3) and t["empty"].dtype == np.float32
    assert t["one"].tolist() == [2.5]


def test_tensors_of_heads_the_model_does_not_run_are_ignored_with_a_warning(tmp_path):
    """A checkpoint of upstream's base model class carries a point head the streaming model does not run
    (upstream's demo loads with strict=False); Model.load refused it, now it warns as run's notice."""
    weights = lm.load_safetensors(TINY / "weights.safetensors")
    weights["point_head.fc.weight"] = np.ones((3, 4), np.float32)
    header, blobs, at = {}, [], 0
    for name, a in weights.items():
        data = np.ascontiguousarray(a, np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header).encode()
    path = tmp_path / "with_point_head.safetensors"
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(blobs))
    with pytest.warns(UserWarning) as w:
        model = lm.Model.load(path)
    assert [str(x.message) for x in w] == [
        "checkpoint tensors of modules this model does not run are ignored (as upstream's demo drops them): "
        "point_head (1 tensors, 12 parameters)"]
    with lm.Session(model, scale_frames=1) as s:
        assert len(s.push(lm.load_image(sorted(FRAMES.iterdir())[0]))) == 1


def test_viewer_frames_say_whether_the_timestamp_is_seconds(demo_model, tmp_path):
    """A timestamp given to push() (or a video's) is seconds: the viewer file's flags bit 1 is set and
    survives pickling; frames without one carry their index, and the bit is clear."""
    import pickle
    import struct

    def flags_and_timestamps(folder):
        out = []
        for f in sorted((folder / "viewer").glob("*.bin")):
            flags, = struct.unpack_from("<I", f.read_bytes(), 12)
            stamp, = struct.unpack_from("<d", f.read_bytes(), 24)
            out.append((flags & 2, stamp))
        return out

    with lm.Session(demo_model, scale_frames=2) as s:
        timed = [r for i in range(3) for r in s.push(lm.demo_frame(i), timestamp=0.5 * i)] + s.finish()
    untimed = list(lm.reconstruct(images=[lm.demo_frame(i) for i in range(3)], model=demo_model, scale_frames=2))
    for name, results in (("timed", [pickle.loads(pickle.dumps(r)) for r in timed]), ("untimed", untimed)):
        with lm.Exporter(tmp_path / name, export="viewer") as ex:
            for r in results:
                ex.write(r)
    assert flags_and_timestamps(tmp_path / "timed") == [(2, 0.0), (2, 0.5), (2, 1.0)]
    assert flags_and_timestamps(tmp_path / "untimed") == [(0, 0.0), (0, 1.0), (0, 2.0)]


def test_an_exporter_dropped_without_close_finishes_its_files_with_a_warning(demo_model, tmp_path):
    import gc
    results = list(lm.reconstruct(images=[lm.demo_frame(i) for i in range(3)], model=demo_model, scale_frames=2))
    ex = lm.Exporter(tmp_path / "dropped", export="poses,glb")
    for r in results:
        ex.write(r)
    with pytest.warns(ResourceWarning, match="was not closed: its files were finished at garbage collection"):
        del ex
        gc.collect()
    assert len(json.loads((tmp_path / "dropped" / "poses.json").read_text())["frames"]) == 3
    assert (tmp_path / "dropped" / "scene.glb").stat().st_size > 0


def test_two_exporters_share_a_folder(demo_model, tmp_path):
    """An Exporter's first write removes earlier outputs of its own exports only: another Exporter
    writing other exports into the same folder keeps its files (an earlier run's summary.json goes)."""
    results = list(lm.reconstruct(images=[lm.demo_frame(i) for i in range(3)], model=demo_model, scale_frames=2))
    out = tmp_path / "shared"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    (out / "trajectory.tum").write_text("earlier run\n")
    with lm.Exporter(out, export="ply,poses") as a, lm.Exporter(out, export="depth,tum") as b:
        a.write(results[0])
        b.write(results[0])
        for r in results[1:]:
            a.write(r)
            b.write(r)
    assert len(json.loads((out / "poses.json").read_text())["frames"]) == 3
    assert a.report()["ply"]["points"] > 0 and (out / "points.ply").stat().st_size > 0
    assert len((out / "trajectory.tum").read_text().splitlines()) == 3  # this run's 3 poses, not the earlier line
    assert sorted(p.name for p in (out / "depth").glob("*.npy"))[:1] == ["000000.npy"]
    assert not (out / "summary.json").exists()


def test_exporter_meta_is_checked_at_construction(tmp_path):
    for key, why in (("frames", "poses.json metadata must not contain the key 'frames' (the file's own)"),
                     ("image_width", "meta must not contain the key 'image_width' (the Exporter sets it from the frames)")):
        with pytest.raises(ValueError) as e:
            lm.Exporter(tmp_path / key, export="poses", meta={key: 1})
        assert str(e.value) == why


def test_exporter_refuses_a_folder_that_can_never_be_made_at_construction(tmp_path):
    # It failed only at the first write, after the computation ("cannot create folder ...: Not a directory").
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(lm.Error) as e:
        lm.Exporter(tmp_path / "notes.txt" / "out")
    assert str(e.value) == f"Exporter folder {tmp_path}/notes.txt/out: {tmp_path}/notes.txt is not a folder"
    with pytest.raises(lm.Error) as e:
        lm.Exporter(tmp_path / "notes.txt")
    assert str(e.value) == f"Exporter folder {tmp_path}/notes.txt exists and is not a folder"
    assert not (tmp_path / "out").exists()


def test_reconstruct_takes_the_list_as_it_was_given(demo_model):
    frames = [lm.demo_frame(i) for i in range(3)]
    it = lm.reconstruct(images=frames, model=demo_model, scale_frames=2)
    frames.append(lm.demo_frame(3))
    frames[0] = lm.demo_frame(7, width=70, height=112)  # another size: read later, it would fail
    assert [r.frame_index for r in it] == [0, 1, 2]


def test_names_that_are_not_utf8_round_trip(tiny_model, tmp_path):
    # A Latin-1 folder and frame name: Result.source is what os.fsdecode gives (it raised
    # UnicodeDecodeError on access), push(source=) and pickles take it back, and an Exporter writes it
    # to poses.json with U+FFFD where the byte was.
    folder = pathlib.Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    folder.mkdir()
    names = ["000000.png", "000001.png", os.fsdecode(b"00000\xe9.png")]
    for i, name in enumerate(names):
        shutil.copy(TINY / "frames" / f"00000{i}.png", folder / name)
    results = list(lm.reconstruct(images=folder, model=tiny_model, **TINY_OPTIONS))
    assert [r.source for r in results] == names
    assert os.fsencode(results[2].source) == b"00000\xe9.png"
    assert results[2].source in repr(results[2])
    again = pickle.loads(pickle.dumps(results[2]))
    assert again.source == names[2]

    with lm.Session(tiny_model, **TINY_OPTIONS) as s:
        pushed = []
        for name in names:
            pushed += s.push(lm.load_image(folder / name), source=name)
        pushed += s.finish()
    assert [r.source for r in pushed] == names
    with lm.Session(tiny_model, **TINY_OPTIONS) as s:
        # A refused source is refused before the step: nothing pushed, the Session goes on.
        with pytest.raises(TypeError, match=r"^source must be a str, got int$"):
            s.push(lm.load_image(folder / names[0]), source=3)
        with pytest.raises(UnicodeEncodeError):
            s.push(lm.load_image(folder / names[0]), source="\ud800")
        assert s.frames_pushed == 0
        again = []
        for name in names:
            again += s.push(lm.load_image(folder / name), source=folder / name)  # a path: os.fspath
        again += s.finish()
    assert [r.source for r in again] == [str(folder / name) for name in names]

    with lm.Exporter(tmp_path / "out", export=["poses"]) as ex:
        for r in results:
            ex.write(r)
    poses = json.loads((tmp_path / "out" / "poses.json").read_text(encoding="utf-8"))
    assert poses["frames"][2]["source"] == "00000\ufffd.png"

    model_dir = pathlib.Path(os.fsdecode(bytes(tmp_path) + b"/mod\xe8les"))
    model_dir.mkdir()
    shutil.copy(TINY / "model.pt", model_dir / "model.pt")
    model = lm.Model.load(model_dir / "model.pt")
    assert model.source == str(model_dir / "model.pt")
    assert pickle.loads(pickle.dumps(model)).source == model.source
    assert model.source in repr(model)
    # That path as poses.json's "model", as run writes it (it raised a JSON parser's RuntimeError),
    # beside a lone surrogate of another kind, an emoji, and one given as its surrogate pair.
    meta = {"model": model.source, "other": "a\ud800b", "ok": "\U0001f600", "pair": "\ud83d\ude00"}
    with lm.Exporter(tmp_path / "meta", export=["poses"], meta=meta) as ex:
        ex.write(results[0])
    meta = json.loads((tmp_path / "meta" / "poses.json").read_text(encoding="utf-8"))
    assert meta["model"] == str(tmp_path) + "/mod\ufffdles/model.pt"
    assert meta["other"] == "a\ufffdb" and meta["ok"] == meta["pair"] == "\U0001f600"


def test_huge_timestamps_are_written_whole(tiny_model, tmp_path):
    # Any finite timestamp is accepted; the line writers wrote a fixed 256-byte buffer's worth of a
    # longer line (bytes past it from the stack) into trajectory.tum.
    with lm.Session(tiny_model, **TINY_OPTIONS) as s:
        results = []
        for i, p in enumerate(sorted(FRAMES.iterdir())[:3]):
            results += s.push(lm.load_image(p), timestamp=1e300 * (i + 1))
        results += s.finish()
    with lm.Exporter(tmp_path, export=["tum", "bss"]) as ex:
        for r in results:
            ex.write(r)
    for name, fields in (("trajectory.tum", 8), ("bss/traj.txt", 13), ("bss/intrinsics.txt", 7)):
        lines = (tmp_path / name).read_text(encoding="ascii").splitlines()
        assert len(lines) == 3, name
        for i, line in enumerate(lines):
            values = line.split(" ")
            assert len(values) == fields, (name, line)
            assert values[0] == "%.6f" % (1e300 * (i + 1)), name
            assert all(np.isfinite(float(v)) for v in values), name


def test_pad_margins_give_no_points(tiny_model, tmp_path):
    """preprocess='pad': the 112x70 pictures sit in rows 21..90 of the 112x112 square; Result.content_rect
    says so, and the Exporter and select_points(content_rect=) take no point from the white margins."""
    results = list(lm.reconstruct(images=FRAMES, model=tiny_model, first_k=3, preprocess="pad", **TINY_OPTIONS))
    assert [r.content_rect for r in results] == [(0, 21, 112, 70)] * 3
    assert results[0].depth.shape == (112, 112)  # the depth covers the whole square
    with lm.Exporter(tmp_path, conf_threshold=0.0, downsample=1) as ex:
        for r in results:
            ex.write(r)
    xyz, _ = read_ply(tmp_path / "points.ply")
    assert len(xyz) == 3 * 112 * 70
    sel = [lm.select_points(r.world_points, r.image, r.conf, r.depth, conf_threshold=0.0, downsample=1,
                            content_rect=r.content_rect) for r in results]
    np.testing.assert_array_equal(xyz, np.concatenate([s[0] for s in sel]))
    assert len(lm.select_points(results[0].world_points, results[0].image, conf_threshold=0.0, downsample=1)[0]) == 112 * 112
    with pytest.raises(ValueError) as e:
        lm.select_points(results[0].world_points, results[0].image, content_rect=(0, 21, 113, 70))
    assert str(e.value) == "content_rect (0, 21, 113, 70) is not inside the 112x112 (HxW) frame"
    with pytest.raises(ValueError) as e:
        lm.select_points(results[0].world_points, results[0].image, content_rect=(0, 21, 112))
    assert str(e.value) == "content_rect must be None or (x, y, width, height) ints (Result.content_rect), got (0, 21, 112)"
    # Pickled with the rectangle; a model input given as it is has none; crop mode covers the frame.
    back = pickle.loads(pickle.dumps(results[1]))
    assert back.content_rect == (0, 21, 112, 70)
    as_given = next(iter(lm.reconstruct(images=[results[0].image], model=tiny_model, scale_frames=1)))
    assert as_given.content_rect is None
    crop = next(iter(lm.reconstruct(images=FRAMES, model=tiny_model, first_k=2, **TINY_OPTIONS)))
    assert crop.content_rect == (0, 0, 112, 70)
    with lm.Session(tiny_model, scale_frames=1, image_size=112, preprocess="pad") as s:
        assert s.push(lm.load_image(FRAMES / "000000.png"))[0].content_rect == (0, 21, 112, 70)
    # A pickle of the version before content_rect (13 fields) still loads, with none.
    from_state, (state,) = results[0].__reduce__()
    old = from_state((2,) + tuple(state[1:13]))
    assert old.content_rect is None and old.frame_index == 0


def readme_source_intrinsics(K, w0, h0, image_size, preprocess, canvas=None):
    """docs/cli.md's recipe for the intrinsics on the original picture, written out independently."""
    longer_is_height = preprocess == "pad" and w0 < h0
    if longer_is_height:
        h1, w1 = image_size, round(w0 * (image_size / h0) / 14) * 14
    else:
        w1, h1 = image_size, round(h0 * (image_size / w0) / 14) * 14
    H1, c = (image_size, (h1 - image_size) // 2) if preprocess == "crop" and h1 > image_size else (h1, 0)
    W, H = canvas if canvas else ((image_size, image_size) if preprocess == "pad" else (w1, H1))
    left, top = (W - w1) // 2, (H - H1) // 2 - c
    sx, sy = w1 / w0, h1 / h0
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    return np.array([[fx / sx, 0, (cx - left + 0.5) / sx - 0.5], [0, fy / sy, (cy - top + 0.5) / sy - 0.5], [0, 0, 1]])


def test_source_size_and_intrinsics_are_the_pictures(tiny_model, tmp_path):
    """Result.source_size is the picture's own size and source_K the camera in its pixels: docs/cli.md's
    recipe gives the same matrix (crop with rows cut, pad, a canvas of mixed sizes), poses.json holds the
    same values, pickles keep them, and a model input given as it is has neither."""
    rng = np.random.default_rng(3)
    folder = tmp_path / "frames"
    folder.mkdir()
    sizes = [(160, 120), (160, 120), (90, 150)]  # the portrait one makes the canvas 112x112 in crop mode
    for i, (w, h) in enumerate(sizes):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / f"{i:03d}.png")
    for preprocess, canvas in (("crop", (112, 112)), ("pad", None)):
        with pytest.warns(UserWarning, match="preprocess to 2 sizes") if canvas else contextlib.nullcontext():
            results = list(lm.reconstruct(images=folder, model=tiny_model, scale_frames=1, image_size=112,
                                          preprocess=preprocess, threads=1))
        out = tmp_path / preprocess
        with lm.Exporter(out, export="poses") as ex:
            for r in results:
                ex.write(r)
        poses = json.loads((out / "poses.json").read_text())["frames"]
        for r, (w, h), entry in zip(results, sizes, poses):
            assert r.source_size == (w, h)
            assert r.source_K.dtype == np.float64 and r.source_K.shape == (3, 3)
            np.testing.assert_allclose(r.source_K, readme_source_intrinsics(r.K.astype(np.float64), w, h, 112, preprocess,
                                                                            canvas), rtol=0, atol=1e-9)
            assert entry["source_size"] == [w, h]
            np.testing.assert_array_equal(np.array(entry["source_intrinsics"]), r.source_K)
    back = pickle.loads(pickle.dumps(results[2]))
    assert back.source_size == (90, 150)
    np.testing.assert_array_equal(back.source_K, results[2].source_K)
    as_given = next(iter(lm.reconstruct(images=[results[0].image], model=tiny_model, scale_frames=1)))
    assert as_given.source_size is None and as_given.source_K is None
    with lm.Session(tiny_model, scale_frames=1) as s:  # a picture taken as it is: its camera is the frame's
        taken = s.push(rng.integers(0, 256, (70, 112, 3), dtype=np.uint8))[0]
    assert taken.source_size == (112, 70)
    np.testing.assert_array_equal(taken.source_K, taken.K)
    # A pickle of the version before the source placement (14 fields) loads, without it.
    from_state, (state,) = results[0].__reduce__()
    old = from_state((3,) + tuple(state[1:14]))
    assert old.source_size is None and old.source_K is None and old.content_rect == results[0].content_rect
    assert not results[0].source_K.flags.writeable  # a value, as every array of a Result
    refused = "not a pickled lingbot_map.Result"
    arrays = list(state[10])
    arrays[4] = np.zeros((2, 2), np.float32)
    for crafted, message in (
            (tuple(state[:14]) + ((90, 150, 0, 112, 0, 0),), f"{refused}: the source placement value 0 is out of range"),
            (tuple(state[:14]) + ((90, 150, 112, 0, 0),), f"{refused}: the source placement is not None or a tuple of 6 ints"),
            (tuple(state[:14]) + ((90, 150, 112, 112, 0.5, 0),), f"{refused}: the source placement holds float, not int"),
            (tuple(state[:14]) + ((90, 150, 112, 112, 2**70, 0),), f"{refused}: the source placement value {2**70} is out of range"),
            (tuple(state[:14]), f"{refused} of this version"),  # version 4 with version 3's fields
            (tuple(state[:10]) + (tuple(arrays),) + tuple(state[11:]), f"{refused}: K is not [3, 3]")):
        with pytest.raises(ValueError) as e:
            from_state(crafted)
        assert str(e.value) == message


def test_input_notices_are_user_warnings(tiny_model, tmp_path):
    """As run's notice: files of a format the folder reader does not take are not frames, and a
    UserWarning says so (they went silently before)."""
    for name in ("000000.png", "000001.png"):
        shutil.copy(FRAMES / name, tmp_path / name)
    (tmp_path / "000002.webp").write_bytes(b"RIFF")
    (tmp_path / "000003.tif").write_bytes(b"II*")
    with pytest.warns(UserWarning) as w:
        rec = lm.reconstruct(images=tmp_path, model=tiny_model, **TINY_OPTIONS)
    assert [str(x.message) for x in w] == [
        "2 image files of another format in the folder are not read (1 .tif, 1 .webp): frames are .jpg, .jpeg, .png "
        "and .bmp files"]
    assert rec.frame_count == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the frames' own folder: no warning
        lm.reconstruct(images=FRAMES, model=tiny_model, **TINY_OPTIONS)
    # Names whose numbers are not zero-padded: read in byte order (as upstream), and said so.
    unpadded = tmp_path / "unpadded"
    unpadded.mkdir()
    for i in (1, 2, 10):
        shutil.copy(FRAMES / "000000.png", unpadded / f"img{i}.png")
    with pytest.warns(UserWarning) as w:
        rec = lm.reconstruct(images=unpadded, model=tiny_model, **TINY_OPTIONS)
    assert [str(x.message) for x in w] == [
        "frames are read in byte order of their names, as upstream sorts them: img10.png comes before img2.png. If the "
        "numbers count the capture order, zero-pad them to one width (img002.png, img010.png)"]
    assert [r.source for r in rec] == ["img1.png", "img10.png", "img2.png"]
    # Frames of two sizes (a portrait one among landscape ones): every frame is padded to one canvas.
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("000000.png", "000001.png"):
        shutil.copy(FRAMES / name, mixed / name)
    Image.open(FRAMES / "000002.png").transpose(Image.Transpose.ROTATE_90).save(mixed / "000002.png")
    with pytest.warns(UserWarning) as w:
        lm.reconstruct(images=mixed, model=tiny_model, **TINY_OPTIONS)
    assert len(w) == 1 and str(w[0].message).startswith("the frames preprocess to 2 sizes ("), str(w[0].message)
    # The same frames as a list of arrays: the same warning (a probe found arrays padded silently).
    arrays = [lm.load_image(p) for p in sorted(mixed.iterdir())]
    with pytest.warns(UserWarning) as from_arrays:
        lm.reconstruct(images=arrays, model=tiny_model, **TINY_OPTIONS)
    assert [str(x.message) for x in from_arrays] == [str(w[0].message)]
