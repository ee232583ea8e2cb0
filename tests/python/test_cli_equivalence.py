"""Python results equal `lingbot-map run`'s bit for bit on the golden tiny case, with docs/cli.md's
golden options (folder input and video input), and the Python Exporter writes the CLI's files byte
for byte."""
import filecmp
import json
import pathlib

import numpy as np
import pytest

import lingbot_map as lm
from conftest import TINY, TINY_CLI_OPTIONS, TINY_OPTIONS, run_cli

FRAMES = TINY / "frames"
N = 10


def run_files(out: pathlib.Path) -> list[str]:
    """Every file a run leaves in `out` except summary.json (run's own report), relative paths."""
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != "summary.json")


def export(results_iter, out: pathlib.Path, model_label: str, **kwargs) -> list:
    results = []
    with lm.Exporter(out, meta={"model": model_label, "demo": False}, **kwargs) as ex:
        for r in results_iter:
            ex.write(r)
            results.append(r)
        assert ex.frames == len(results)
    return results


def assert_same_files(a: pathlib.Path, b: pathlib.Path) -> None:
    names = run_files(b)
    assert run_files(a) == names
    for name in names:
        assert filecmp.cmp(a / name, b / name, shallow=False), f"{name} differs"


def assert_results_equal_cli(results, cli_out: pathlib.Path) -> None:
    poses = json.loads((cli_out / "poses.json").read_text())
    assert len(results) == len(poses["frames"]) == N
    for i, (r, f) in enumerate(zip(results, poses["frames"])):
        assert (r.frame_index, r.is_keyframe, r.source, r.timestamp) == (f["index"], f["keyframe"], f["source"], f["timestamp"])
        # poses.json stores each float32 as the double it converts to (shortest round-trip text), so
        # the comparison at the precision the file stores is exact equality.
        np.testing.assert_array_equal(np.array(f["c2w"], dtype=np.float64)[:3], r.c2w.astype(np.float64))
        np.testing.assert_array_equal(np.array(f["intrinsics"], dtype=np.float64), r.K.astype(np.float64))
        # w2c in poses.json is the double-precision rigid inverse of c2w; the engine's w2c is its
        # float32 inverse: equal up to float32 rounding.
        np.testing.assert_allclose(np.array(f["w2c"]), r.w2c, rtol=0, atol=1e-6)
        for suffix, arr in (("", r.depth), ("_conf", r.conf)):
            ref = np.load(cli_out / "depth" / f"{i:06d}{suffix}.npy")
            assert ref.dtype == arr.dtype == np.float32 and ref.shape == arr.shape == (70, 112)
            assert ref.tobytes() == arr.tobytes(), f"frame {i} depth{suffix} differs"


@pytest.fixture(scope="module")
def cli_folder_run(cli, tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("cli") / "out"
    run_cli(cli, "run", "--images", FRAMES, "--model", TINY / "model.pt", *TINY_CLI_OPTIONS, "--out", out)
    return out


def test_reconstruct_folder_equals_cli(cli_folder_run, tiny_model, tmp_path):
    it = lm.reconstruct(images=FRAMES, model=tiny_model, **TINY_OPTIONS)
    assert (it.kind, it.frame_count, it.image_size) == ("images", N, (112, 70))
    results = export(it, tmp_path, str(TINY / "model.pt"))
    assert_results_equal_cli(results, cli_folder_run)
    assert_same_files(tmp_path, cli_folder_run)


def test_cache_stats_equal_the_summary_cache(cli_folder_run, tiny_model):
    """Session.stats() and summary.json's "cache" report the same KV cache under the same names (one name
    per concept: max_special_frames' special_frames_dropped was missing from one, kept_special_tokens
    from the other)."""
    summary = json.loads((cli_folder_run / "summary.json").read_text())["cache"]
    it = lm.reconstruct(images=FRAMES, model=tiny_model, **TINY_OPTIONS)
    list(it)
    stats = it.stats()
    # The summary counts frames at its top level ("frames"); device memory: summary's top level too.
    python_only = {"frames_completed", "device_peak_bytes", "device_kv_cache_bytes"}
    assert set(summary) == set(stats) - python_only
    assert {k: stats[k] for k in summary} == summary


def test_every_export_kind_equals_cli(cli, tiny_model, tmp_path):
    """Exporter(export='all') writes what `run --export all` writes: npz, COLMAP, GLB, BSS, previews."""
    cli_out = tmp_path / "cli"
    run_cli(cli, "run", "--images", FRAMES, "--model", TINY / "model.pt", *TINY_CLI_OPTIONS, "--export", "all",
            "--out", cli_out)
    results = export(lm.reconstruct(images=FRAMES, model=tiny_model, **TINY_OPTIONS), tmp_path / "py",
                     str(TINY / "model.pt"), export="all")
    assert results[0].is_scale_frame and results[1].is_scale_frame and not results[2].is_scale_frame
    names = run_files(cli_out)
    assert {"scene.glb", "predictions.npz", "colmap/images.txt", "bss/traj.txt", "depth_preview/000000.png"} <= set(names)
    assert_same_files(tmp_path / "py", cli_out)
    summary = json.loads((cli_out / "summary.json").read_text())
    ex = lm.Exporter(tmp_path / "again", export=["ply", "poses"])
    for r in results:
        ex.write(r)
    ex.close()
    assert ex.report()["ply"] == summary["exports"]["ply"]
    assert sorted(ex.report()) == ["ply", "poses"]


def test_reconstruct_model_path_and_array_list_equal_cli(cli_folder_run, tmp_path):
    frames = [lm.load_image(p) for p in sorted(FRAMES.iterdir())]
    it = lm.reconstruct(images=frames, model=TINY / "model.pt", **TINY_OPTIONS)
    assert it.kind == "arrays"
    results = list(it)
    for r, name in zip(results, sorted(p.name for p in FRAMES.iterdir())):
        assert r.source == f"array_{r.frame_index}"
    poses = json.loads((cli_folder_run / "poses.json").read_text())
    for i, r in enumerate(results):
        np.testing.assert_array_equal(np.array(poses["frames"][i]["c2w"])[:3], r.c2w.astype(np.float64))
        assert np.load(cli_folder_run / "depth" / f"{i:06d}.npy").tobytes() == r.depth.tobytes()


@pytest.mark.parametrize("preprocess", [False, True])
def test_session_push_equals_cli(cli_folder_run, tiny_model, tmp_path, preprocess):
    """Session.push on uint8 frames: as-is (/255) or with run's preprocessing (image_size=112)."""
    kwargs = dict(scale_frames=2, kv_window=3, keyframe_interval=1)
    if preprocess:
        kwargs["image_size"] = 112
    results = []
    with lm.Session(tiny_model, **kwargs) as s:
        for i, p in enumerate(sorted(FRAMES.iterdir())):
            results += s.push(lm.load_image(p), source=p.name)  # timestamp: the index, as a folder run
        results += s.finish()
    assert_results_equal_cli(results, cli_folder_run)
    export(iter(results), tmp_path, str(TINY / "model.pt"))
    assert_same_files(tmp_path, cli_folder_run)


def write_y4m(path: pathlib.Path, frames: list) -> None:
    """A YUV4MPEG2 (4:4:4) video: FFmpeg reads it without any encoder, so no media is committed."""
    h, w, _ = frames[0].shape
    with open(path, "wb") as f:
        f.write(f"YUV4MPEG2 W{w} H{h} F10:1 Ip A1:1 C444\n".encode())
        for fr in frames:
            r, g, b = (fr[..., c].astype(np.float64) for c in range(3))
            y = 16 + (65.481 * r + 128.553 * g + 24.966 * b) / 255
            u = 128 + (-37.797 * r - 74.203 * g + 112.0 * b) / 255
            v = 128 + (112.0 * r - 93.786 * g - 18.214 * b) / 255
            f.write(b"FRAME\n" + b"".join(np.clip(np.rint(c), 0, 255).astype(np.uint8).tobytes() for c in (y, u, v)))


def test_reconstruct_video_equals_cli(cli, tiny_model, tmp_path):
    video = tmp_path / "tiny.y4m"
    write_y4m(video, [lm.load_image(p) for p in sorted(FRAMES.iterdir())])
    cli_out = tmp_path / "cli"
    run_cli(cli, "run", "--video", video, "--fps", "0", "--model", TINY / "model.pt", *TINY_CLI_OPTIONS, "--out", cli_out)
    it = lm.reconstruct(video=video, model=tiny_model, fps=0, **TINY_OPTIONS)
    assert (it.kind, it.frame_count) == ("video", None)
    results = export(it, tmp_path / "py", str(TINY / "model.pt"))
    assert [r.source for r in results] == [f"frame_{i}" for i in range(N)]
    assert_same_files(tmp_path / "py", cli_out)


def test_flow_keyframes_equal_cli(cli, tiny_model, tmp_path):
    """keyframe_interval='flow' is run's --keyframe-interval flow: the same frames stored, the same files."""
    frames = TINY.parent / "streaming-flow-tiny" / "frames"
    flow_cli = ["--keyframe-interval", "flow", "--flow-threshold", "5", "--max-non-keyframe-gap", "3"]
    run_cli(cli, "run", "--images", frames, "--model", TINY / "model.pt", "--image-size", "112", "--scale-frames",
            "2", "--kv-window", "3", *flow_cli, "--out", tmp_path / "cli")
    it = lm.reconstruct(images=frames, model=tiny_model, image_size=112, scale_frames=2, kv_window=3, keyframe_interval="flow",
                        flow_threshold=5.0, max_non_keyframe_gap=3)
    assert it.options["keyframe_interval"] is None  # no interval: the policy decides
    assert it.options["keyframe_policy"].startswith("flow")
    results = export(it, tmp_path / "py", str(TINY / "model.pt"))
    types = [r.frame_type for r in results]
    assert "non-keyframe" in types and types[:2] == ["scale", "scale"]
    assert all(r.flow >= 0 for r in results[2:]) and all(r.flow == -1 for r in results[:2])
    assert_same_files(tmp_path / "py", tmp_path / "cli")


WINDOWED_CLI = ["--mode", "windowed", "--window-size", "5", "--overlap-size", "2"]
WINDOWED = dict(mode="windowed", window_size=5, overlap_size=2)


def test_windowed_mode_equals_cli(cli, tiny_model, tmp_path):
    """mode='windowed' is run's --mode windowed: the same windows, alignment and files (reconstruct and
    Session.push), and a Session's reset() runs the sequence again identically."""
    cli_out = tmp_path / "cli"
    run_cli(cli, "run", "--images", FRAMES, "--model", TINY / "model.pt", *TINY_CLI_OPTIONS, *WINDOWED_CLI,
            "--out", cli_out)
    summary = json.loads((cli_out / "summary.json").read_text())
    assert len(summary["windows"]) >= 3  # 10 frames in windows of 5 overlapping by 2

    it = lm.reconstruct(images=FRAMES, model=tiny_model, **TINY_OPTIONS, **WINDOWED)
    keys = ("mode", "window_size", "overlap_size", "overlap_keyframes", "overlap_frames", "keyframe_interval")
    assert {k: it.options[k] for k in keys} == {k: summary["options"][k] for k in keys}
    assert (it.options["mode"], it.options["window_size"], it.options["overlap_size"]) == ("windowed", 5, 2)
    results = export(it, tmp_path / "py", str(TINY / "model.pt"))
    assert_results_equal_cli(results, cli_out)
    assert_same_files(tmp_path / "py", cli_out)
    windows = it.windows
    assert [(w["index"], w["start"], w["end"]) for w in windows] == \
        [(w["index"], w["start"], w["end"]) for w in summary["windows"]]
    for w, ref in zip(windows, summary["windows"]):
        assert w["aligned"] and w["transform"].shape == (4, 4) and w["transform"].dtype == np.float32
        np.testing.assert_array_equal(w["transform"].astype(np.float64), np.array(ref["transform"]))
        assert float(w["scale"]) == ref["scale"]
        assert w["cache"] == ref["cache"] and w["cache"]["frames_stored"] == w["end"] - w["start"]
        assert w["aligned"] is ref["aligned"] is True
    np.testing.assert_array_equal(windows[0]["transform"], np.eye(4, dtype=np.float32))
    # Each frame comes from the window that owns it: the first window's frames from window 0, and
    # every later window contributes frames after the overlap.
    assert [r.window_index for r in results][:3] == [0, 0, 0] and results[-1].window_index == len(windows) - 1
    assert sorted({r.window_index for r in results}) == list(range(len(windows)))
    with pytest.warns(DeprecationWarning, match=r"Result\.window is deprecated, use Result\.window_index"):
        assert results[-1].window == results[-1].window_index > 0  # the old spelling, docs/naming.md

    with lm.Session(tiny_model, scale_frames=2, kv_window=3, keyframe_interval=1, image_size=112, **WINDOWED) as s:
        assert s.windows == [] and s.options["mode"] == "windowed"
        for attempt in range(2):
            pushed = []
            for i, p in enumerate(sorted(FRAMES.iterdir())):
                pushed += s.push(lm.load_image(p), source=p.name, timestamp=float(i))
            assert len(pushed) < N  # the last window's frames wait for finish()
            pushed += s.finish()
            assert s.finished
            assert_results_equal_cli(pushed, cli_out)
            assert len(s.windows) == len(windows)
            with pytest.raises(lm.Error, match=r"push after the end of the sequence \(finish\(\) or finish_early\(\)\): call reset\(\)"):
                s.push(lm.load_image(sorted(FRAMES.iterdir())[0]))
            s.reset()
            assert s.frames_pushed == 0 and s.windows == [] and not s.finished
        for _ in FRAMES.iterdir():
            s.push(lm.load_image(sorted(FRAMES.iterdir())[0]))
        held = s.windows
        with pytest.warns(RuntimeWarning, match=r"with frame 9 pushed and no result for it: call finish\(\) first, which "
                          r"computes it \(mode='windowed' returns frames in bursts, as windows are aligned; the last ones at "
                          r"finish\(\)\)"):
            s.close()
    assert [w["start"] for w in s.windows] == [w["start"] for w in held]  # kept after close (its cache freed)


def test_windowed_early_end_and_refused_frames(tiny_model):
    """finish_early() returns the rows a windowed run computed and held back for the overlap (what run
    writes when it stops early); a frame refused before its step (another size) leaves the Session open."""
    frames = [lm.load_image(p) for p in sorted(FRAMES.iterdir())]
    kw = dict(image_size=112, scale_frames=2, kv_window=3, keyframe_interval=1, **WINDOWED)
    full = list(lm.reconstruct(images=frames, model=tiny_model, **kw))
    it = lm.reconstruct(images=frames, model=tiny_model, **kw)
    first = [next(it) for _ in range(4)]  # frames 3-5 come together once window 0 is aligned
    tail = it.finish_early()
    assert [r.frame_index for r in tail] == [4, 5], "the queued rows of frames already computed"
    got = first + tail
    assert [r.frame_index for r in got] == list(range(len(got))) and len(got) < N
    assert it.finish_early() == [] and list(it) == []
    for a, b in zip(got, full):  # rows of aligned windows are final: the same as in the full run
        if b.window_index < got[-1].window_index:
            assert a.depth.tobytes() == b.depth.tobytes() and a.c2w.tobytes() == b.c2w.tobytes()

    with lm.Session(tiny_model, **kw) as s:
        out = []
        for i, f in enumerate(frames[:7]):
            out += s.push(f)
            if i == 3:
                with pytest.raises(lm.Error, match="preprocesses to 56x112 at image_size=112"):
                    s.push(f[:56])
                assert not s.finished and s.frames_pushed == 4
        assert [r.frame_index for r in out] == list(range(6))
        out += s.finish_early()  # frame 6: computed by window 1, held back for the overlap
        assert s.finished and [r.frame_index for r in out] == list(range(7))
        assert all(a.depth.tobytes() == b.depth.tobytes() for a, b in zip(out, full) if b.window_index < out[-1].window_index)
        with pytest.raises(lm.Error, match=r"push after the end of the sequence"):
            s.push(frames[0])
        assert s.finish_early() == []
    with lm.Session(tiny_model, image_size=112, scale_frames=2) as s:  # streaming: nothing is held back
        assert s.push(frames[0]) == [] and s.finish_early() == []


def test_old_spellings_warn_and_still_work(tiny_model):
    """keyframes= and mode='crop'|'pad' (the names before docs/naming.md) give a DeprecationWarning."""
    frames = [lm.load_image(p) for p in sorted(FRAMES.iterdir())[:3]]
    with pytest.warns(DeprecationWarning, match=r"keyframes= is deprecated, use keyframe_interval=") as caught:
        s = lm.Session(tiny_model, scale_frames=2, keyframes=2)
    # Attributed to this line (shown by default when it is in __main__), not to the interpreter.
    assert [w.filename for w in caught] == [__file__]
    assert s.options["keyframe_interval"] == 2 and s.options["keyframes"] == s.options["keyframe_policy"] == "interval 2"
    assert (s.options["preprocess"], s.options["image_size"]) == (None, None)
    with pytest.warns(DeprecationWarning, match=r"mode='pad' is deprecated, use preprocess='pad'"):
        it = lm.reconstruct(images=frames, model=tiny_model, image_size=112, scale_frames=2, mode="pad")
    assert (it.options["mode"], it.options["preprocess"], it.options["image_size"]) == ("streaming", "pad", 112)
    new = lm.reconstruct(images=frames, model=tiny_model, image_size=112, scale_frames=2, preprocess="pad")
    assert it.image_size == new.image_size == (112, 112)  # padded to a square, unlike crop (112x70)
    got, want = list(it), list(new)
    assert len(got) == len(want) == 3
    for a, b in zip(got, want):
        assert a.depth.tobytes() == b.depth.tobytes()
    with pytest.warns(DeprecationWarning, match=r"mode= is deprecated, use preprocess="):
        old = lm.preprocess(frames[0], image_size=112, mode="pad")
    np.testing.assert_array_equal(old, lm.preprocess(frames[0], image_size=112, preprocess="pad"))


def test_demo_model_equals_run_demo(cli, tmp_path):
    """Model.demo() is run --demo's model (weights dtype 'auto' as there): the same files."""
    run_cli(cli, "run", "--demo", "--demo-frames", "6", "--scale-frames", "2", "--out", tmp_path / "cli")
    results = []
    with lm.Session(lm.Model.demo(), scale_frames=2) as s:
        for i in range(6):
            results += s.push(lm.demo_frame(i), source=f"demo_{i}")  # timestamp: the index, as run --demo
        results += s.finish()
    with lm.Exporter(tmp_path / "py", meta={"demo": True, "model": "built-in demo (random weights)"}) as ex:
        for r in results:
            ex.write(r)
    assert_same_files(tmp_path / "py", tmp_path / "cli")


def test_exporter_owns_its_folder_and_keys(tiny_model, tmp_path, cli):
    """An earlier run's summary.json goes with the files it described; poses.json's own keys are refused in meta."""
    run_cli(cli, "run", "--images", FRAMES, "--model", TINY / "model.pt", *TINY_CLI_OPTIONS, "--out", tmp_path)
    assert (tmp_path / "summary.json").exists()
    first = next(iter(lm.reconstruct(images=FRAMES, model=tiny_model, **TINY_OPTIONS)))
    with lm.Exporter(tmp_path, export="poses") as ex:
        ex.write(first)
    assert not (tmp_path / "summary.json").exists() and (tmp_path / "poses.json").exists()
    for key in ("format", "version", "frames"):
        with pytest.raises(ValueError, match=f"poses.json metadata must not contain the key '{key}'"):
            with lm.Exporter(tmp_path / key, export="poses", meta={key: 1}) as ex:
                ex.write(first)


def test_finish_early_ends_a_streaming_sequence_too(tiny_model):
    frames = [lm.load_image(p) for p in sorted(FRAMES.iterdir())[:3]]
    with lm.Session(tiny_model, image_size=112, scale_frames=4) as s:
        s.push(frames[0])
        s.push(frames[1])
        assert s.finish_early() == [] and s.finished  # the scale phase never ran: those frames give no result
        for call in (lambda: s.push(frames[2]), s.finish):
            with pytest.raises(lm.Error, match=r"after the end of the sequence \(finish\(\) or finish_early\(\)\): call reset\(\)"):
                call()
        s.reset()
        assert not s.finished and s.push(frames[0]) == []
        with pytest.raises(ValueError, match="a float32 frame is a model input already"):
            s.push(lm.preprocess(frames[0], image_size=112))
        s.finish_early()  # frame 0 of the new sequence gives no result: said, not warned about at the with-block's end


def test_windows_without_overlap_are_not_aligned(tiny_model, cli, tmp_path):
    run_cli(cli, "run", "--images", FRAMES, "--model", TINY / "model.pt", *TINY_CLI_OPTIONS, "--mode", "windowed",
            "--window-size", "4", "--overlap-size", "0", "--out", tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    with pytest.warns(UserWarning, match="overlap_size=0: consecutive windows share no frame"):
        it = lm.reconstruct(images=FRAMES, model=tiny_model, **TINY_OPTIONS, mode="windowed", window_size=4,
                            overlap_size=0)
    results = list(it)
    assert len(results) == N
    assert [w["aligned"] for w in it.windows] == [True] + [False] * (len(it.windows) - 1) == \
        [w["aligned"] for w in summary["windows"]]
    assert summary["options"]["overlap_frames"] == it.options["overlap_frames"] == 0
    assert all(float(w["scale"]) == 1.0 for w in it.windows)
