"""reconstruct(): input kinds, run's automatic keyframe interval, input errors (exact messages, raised
before the iterator is returned), the Exporter and select_points against the files run writes."""
import shutil

import numpy as np
import pytest

import lingbot_map as lm
from conftest import TINY, TINY_OPTIONS

FRAMES = TINY / "frames"


def test_folder_and_uint8_list_and_float_list_agree(tiny_model):
    folder = list(lm.reconstruct(images=FRAMES, model=tiny_model, **TINY_OPTIONS))
    u8 = [lm.load_image(p) for p in sorted(FRAMES.iterdir())]
    arrays = list(lm.reconstruct(images=u8, model=tiny_model, **TINY_OPTIONS))
    f32 = list(lm.reconstruct(images=[r.image for r in folder], model=tiny_model, **TINY_OPTIONS))
    for a, b, c in zip(folder, arrays, f32):
        assert a.depth.tobytes() == b.depth.tobytes() == c.depth.tobytes()
        assert a.w2c.tobytes() == b.w2c.tobytes() == c.w2c.tobytes()


def test_selection_options_on_a_folder(tiny_model):
    it = lm.reconstruct(images=FRAMES, model=tiny_model, first_k=7, stride=3, **TINY_OPTIONS)
    assert it.frame_count == 3
    assert [r.source for r in it] == ["000000.png", "000003.png", "000006.png"]
    rot = lm.reconstruct(images=FRAMES, model=tiny_model, rotate_cw90=True, first_k=2, image_size=70, scale_frames=2)
    assert rot.image_size == (70, 70)  # upright 70x112 frames, width := 70, centre-cropped to 70 rows
    upright = np.ascontiguousarray(np.rot90(lm.load_image(FRAMES / "000000.png"), k=-1))
    np.testing.assert_array_equal(next(rot).image, lm.preprocess(upright, image_size=70))


def test_mixed_sizes_are_padded_to_the_batch_canvas(demo_model):
    frames = [lm.demo_frame(0, width=112, height=70), lm.demo_frame(1, width=112, height=98)]
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
    assert lm.reconstruct(images=frames, model=demo_model, image_size=112, keyframes=5).options["keyframe_interval"] == 5
    assert lm.Session(demo_model).options["keyframe_interval"] == 1  # an open stream: every frame stored


def test_input_errors_are_raised_before_iterating(demo_model, tmp_path):
    good = [lm.demo_frame(0)]
    cases = [
        (dict(), ValueError, "no input: give images= (a folder or a list of arrays) or video= (a file)"),
        (dict(images=good, video="x.mp4"), ValueError, "give either images= or video=, not both"),
        (dict(images=tmp_path / "nope"), lm.Error, f"image folder not found: {tmp_path / 'nope'}"),
        (dict(images=tmp_path), lm.Error, f"no images (.jpg, .jpeg, .png, .bmp) in {tmp_path}"),
        (dict(video=tmp_path / "nope.mp4"), lm.Error, f"video file not found: {tmp_path / 'nope.mp4'}"),
        (dict(images=[]), lm.Error, "images is an empty list: give at least one frame"),
        (dict(images=42), TypeError, "images must be a folder path or a list of arrays, got int"),
        (dict(images=good, first_k=1), ValueError,
         "first_k, stride and rotate_cw90 select frames of a folder or video; slice the list instead"),
        (dict(images=good + [np.zeros((3, 70, 112), np.float32)]), TypeError,
         "images mixes uint8 frames (preprocessed here) and float32 frames (model inputs): use one kind"),
        (dict(images=good + [np.zeros((70, 112), np.uint8)]), ValueError,
         "images[1] must be a uint8 array [H, W, 3] (RGB) or a float32 array [3, H, W] (RGB in [0, 1]), "
         "got uint8 array of shape (70, 112)"),
        (dict(images=good, image_size=100), lm.Error, "image_size must be a multiple of the model's patch size 14, got 100"),
        (dict(images=good, mode="fit"), ValueError, "mode must be 'crop' or 'pad', got 'fit'"),
        (dict(images=FRAMES, stride=0), lm.Error, "stride must be >= 1, got 0"),
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
    with pytest.raises(lm.Error) as e:
        lm.Exporter(tmp_path / "c", exports="poses,obj")
    assert str(e.value).startswith("unknown export 'obj' (choose from poses, tum, depth, ply, depth-preview, ")
    with pytest.raises(TypeError) as e:
        lm.Exporter(tmp_path / "c", exports=[1])
    assert str(e.value) == "exports must be names (str), got int"
    ex2 = lm.Exporter(tmp_path / "b")
    ex2.close()
    with pytest.raises(lm.Error) as e:
        ex2.write(results[0])
    assert str(e.value) == "the Exporter is closed: create a new one"
    with pytest.raises(lm.Error) as e:
        lm.Exporter(tmp_path / "c", downsample=0)
    assert str(e.value) == "downsample must be >= 1, got 0"


def test_image_helpers(tmp_path):
    img = lm.load_image(FRAMES / "000000.png")
    assert img.dtype == np.uint8 and img.shape == (70, 112, 3)
    pre = lm.preprocess(img, image_size=112)
    np.testing.assert_array_equal(pre, img.transpose(2, 0, 1).astype(np.float32) / np.float32(255))
    padded = lm.preprocess(img, image_size=224, mode="pad")
    assert padded.shape == (3, 224, 224) and padded[:, 0, 0].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(lm.Error) as e:
        lm.load_image(tmp_path / "none.png")
    assert str(e.value) == f"image file not found: {tmp_path / 'none.png'}"
    with pytest.raises(TypeError) as e:
        lm.preprocess(pre)
    assert str(e.value) == "image must be a uint8 array [H, W, 3] (preprocess works on 8-bit RGB)"
